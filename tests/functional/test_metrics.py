"""/metrics end to end: a hub and two agents over real NATS and HTTP, scraped as Prometheus would."""

from __future__ import annotations

from typing import Any

import aiohttp
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for
from prometheus_client.parser import text_string_to_metric_families

from controlplane.api.auth import AuthSettings
from controlplane.store.identities import IdentityStore

ECHO = {"name": "echo", "source": "def handle(event, context):\n    return event\n", "handler": "handle"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when there is none)."""
    wanted = set(labels.items())
    return sum(value for (n, have), value in samples.items() if n == name and wanted <= have)


async def _scrape(url: str, token: str | None = None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


async def test_hub_and_agents_export_what_they_did(nats_server, sqlite_url, tmp_path):
    # One invocation, one instance started: no headroom spare (the agent counts every instance
    # it starts; test_functions.py covers spares).
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="edgeplane-no-headroom") as (running, api),
        running_agents(
            nats_server.url, tmp_path, ["m1", "m2"], metrics_listen=("127.0.0.1", 0), **PYTHON_FUNCTIONS
        ) as agents,
    ):
        reader = await IdentityStore(running.hub.store).create_api_token("prometheus", ["read"])
        workload = await api.post_workload(
            {"name": "hello", "command": ["sh", "-c", "echo hi"], "resources": {"cpu": 0.5, "memory": "64Mi"}}
        )
        await api.wait_status(workload, "Succeeded")
        status, reply = await api.call("POST", "/v1/functions", {**ECHO, "memory": "128Mi"})
        assert status in (200, 201), reply
        async with api.session.post(f"{api.base}/v1/functions/echo/invoke", json={"x": 1}) as response:
            assert response.status == 200 and response.headers["X-Edgeplane-Cold-Start"] == "true"

        status, _, _ = await _scrape(running.url + "/metrics")
        assert status == 401
        status, content_type, text = await _scrape(running.url + "/metrics", reader.token)
        assert status == 200 and content_type.startswith("text/plain")
        hub = _parse(text)
        attempts = "edgeplane_scheduler_schedule_attempts_total"
        assert _value(hub, attempts, result="scheduled", profile="edgeplane") >= 1
        assert _value(hub, "edgeplane_scheduler_scheduling_attempt_duration_seconds_count") >= 1
        assert (
            _value(
                hub,
                "edgeplane_scheduler_framework_extension_point_duration_seconds_count",
                extension_point="Filter",
            )
            >= 1
        )
        assert _value(hub, "edgeplane_scheduler_pending_placements", queue="unschedulable") == 0
        assert _value(hub, "edgeplane_nodes", status="Ready") == 2
        assert _value(hub, "edgeplane_node_ready", node="m1") == 1
        assert _value(hub, "edgeplane_node_cpu_capacity_cores", node="m1") == 4
        assert _value(hub, "edgeplane_node_energy_weight", node="m1") > 0
        assert _value(hub, "edgeplane_function_activations_total", function="echo", status="success") == 1
        assert _value(hub, "edgeplane_function_cold_starts_total", function="echo") == 1
        assert _value(hub, "edgeplane_function_init_time_seconds_count", function="echo") == 1
        assert _value(hub, "edgeplane_bus_connected", cluster="default") == 1
        assert _value(hub, "edgeplane_bus_malformed_messages_total") == 0

        served: dict[str, Any] = {}
        for handle in agents:
            # The hub counts a node Ready from its registration; its first heartbeat may follow
            # later on a loaded machine.
            await wait_for(lambda h=handle: _counted(h.agent.counters["heartbeats"]), bool)
        for handle in agents:
            server = handle.agent.metrics
            assert server is not None and server.url
            status, content_type, text = await _scrape(server.url)
            assert status == 200 and content_type.startswith("text/plain")
            served[handle.agent.config.name] = _parse(text)
        for name, samples in served.items():
            assert _value(samples, "edgeplane_agent_hub_reachable", node=name) == 1
            assert _value(samples, "edgeplane_agent_heartbeats_sent_total") >= 1
            assert _value(samples, "edgeplane_agent_on_battery") == 0
        assert sum(_value(s, "edgeplane_agent_cold_starts_total") for s in served.values()) == 1
        assert sum(_value(s, "edgeplane_agent_invocations_total") for s in served.values()) == 1
        instances = [
            _value(s, "edgeplane_agent_function_instances", function="echo") for s in served.values()
        ]
        assert sum(instances) == 1


async def test_public_metrics_need_no_token(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url, auth=AuthSettings(public_metrics=True)) as (
        running,
        _,
    ):
        status, _, text = await _scrape(running.url + "/metrics")
        assert status == 200
        assert _value(_parse(text), "edgeplane_nodes", status="Ready") == 0
        status, _, _ = await _scrape(running.url + "/v1/nodes")
        assert status == 401  # only /metrics is opened


async def test_the_read_scope_is_what_metrics_need(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, _):
        writer = await IdentityStore(running.hub.store).create_api_token("writer", ["workloads"])
        status, _, _ = await _scrape(running.url + "/metrics", writer.token)
        assert status == 403


async def _counted(value: int) -> int:
    return value
