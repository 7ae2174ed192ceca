"""Serverless functions end to end: hub, NATS, agents and real worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import subprocess
import sys
import time

import pytest
from harness import (
    PYTHON_FUNCTIONS,
    no_eviction_grace,
    running_agents,
    running_hub,
    spawn_agent,
    wait_for,
    write_power_supply,
)

from controlplane.serverless.forecast_live import LiveForecast
from controlplane.serverless.forecast_prewarm import ForecastPrewarmConfig
from controlplane.serverless.keepalive import FixedKeepAlive, Policy, Window

ECHO = {"name": "echo", "source": "def handle(event, context):\n    return event\n", "handler": "handle"}


async def _invoke(api, name, event=None, **query):
    path = f"/v1/functions/{name}/invoke" + (
        "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
    )
    async with api.session.post(api.base + path, json=event) as response:
        return response.status, await response.json(), response.headers


async def _register(api, body):
    status, reply = await api.call("POST", "/v1/functions", body)
    assert status in (200, 201), reply
    return reply


async def test_the_first_call_is_cold_the_second_warm_and_the_result_is_the_handlers(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        await _register(api, {**ECHO, "memory": "128Mi"})
        status, body, headers = await _invoke(api, "echo", {"hello": [1, 2]})
        assert status == 200 and body == {"hello": [1, 2]}
        assert headers["X-Edgeplane-Cold-Start"] == "true"
        assert float(headers["X-Edgeplane-Cold-Start-Ms"]) > 0
        assert headers["X-Edgeplane-Node"] == "f1"
        status, body, headers = await _invoke(api, "echo", {"again": True})
        assert status == 200 and body == {"again": True}
        assert headers["X-Edgeplane-Cold-Start"] == "false"
        assert float(headers["X-Edgeplane-Cold-Start-Ms"]) == 0
        assert float(headers["X-Edgeplane-Total-Ms"]) >= float(headers["X-Edgeplane-Exec-Ms"])
        # The id a synchronous answer names can be looked up, at once and after it is written.
        invocation = headers["X-Edgeplane-Invocation-Id"]
        for _ in range(2):
            record = await api.get(f"/v1/invocations/{invocation}")
            assert record["status"] == "Succeeded" and record["result"] == {"again": True}
            assert record["node"] == "f1" and record["cold_start"] is False
            await asyncio.sleep(1.0)  # past the write-behind flush
        function = await api.get("/v1/functions/echo")
        assert function["stats"]["invocations"] == 2 and function["stats"]["cold_starts"] == 1
        assert function["stats"]["cold_start_rate"] == 0.5
        assert function["stats"]["latency_ms"]["p50"] is not None
        assert function["stats"]["per_node"]["f1"] == {"invocations": 2, "cold_starts": 1}
        instances = (await wait_for(lambda: api.get("/v1/functions/echo"), lambda f: f["instances"]))[
            "instances"
        ]
        assert instances[0]["node"] == "f1" and instances[0]["state"] in ("idle", "busy")


async def test_handler_errors_come_back_structured_and_timeouts_kill_the_instance(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(
            api,
            {
                "name": "boom",
                "source": "def handle(e, c):\n    raise ValueError('bad input ' + str(e))\n",
                "handler": "handle",
            },
        )
        status, body, _ = await _invoke(api, "boom", 7)
        assert status == 502
        assert body["error"]["code"] == "function_error" and body["error"]["type"] == "ValueError"
        assert "bad input 7" in body["error"]["message"] and "Traceback" in body["error"]["traceback"]
        await _register(
            api,
            {
                "name": "slow",
                "source": "import time\ndef handle(e, c):\n    time.sleep(30)\n",
                "handler": "handle",
                "timeout_s": 1,
            },
        )
        started = time.monotonic()
        status, body, _ = await _invoke(api, "slow")
        assert status == 504 and body["error"]["code"] == "timeout"
        assert time.monotonic() - started < 10
        pool = agents[0].agent.functions
        left = [i for i in pool.instances.values() if i.code.name == "slow"]
        # The timed-out instance was killed; what may be left is the spare headroom started
        # beside it (never given the call).
        assert len(left) <= 1 and all(i.state in ("starting", "idle") for i in left), left
        await _register(
            api,
            {
                "name": "broken",
                "source": "import no_such_module\ndef handle(e, c):\n    return 1\n",
                "handler": "handle",
            },
        )
        status, body, _ = await _invoke(api, "broken")
        assert status == 502 and body["error"]["code"] == "init_error"
        assert body["error"]["type"] == "ModuleNotFoundError"
        assert (await api.get("/healthz"))["status"] == "ok"


async def test_an_instance_serves_at_most_its_max_concurrency(nats_server, sqlite_url, tmp_path):
    source = (
        "import threading, time, os\n"
        "lock = threading.Lock()\nactive = 0\npeak = 0\n"
        "def handle(e, c):\n"
        "    global active, peak\n"
        "    with lock:\n        active += 1\n        peak = max(peak, active)\n"
        "    time.sleep(0.4)\n"
        "    with lock:\n        active -= 1\n"
        "    return {'pid': os.getpid(), 'peak': peak}\n"
    )
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        await _register(api, {"name": "limited", "source": source, "handler": "handle", "max_concurrency": 2})
        results = await asyncio.gather(*(_invoke(api, "limited", i) for i in range(6)))
        assert all(status == 200 for status, _, _ in results)
        peaks = [body["peak"] for _, body, _ in results]
        pids = {body["pid"] for _, body, _ in results}
        assert max(peaks) <= 2
        assert len(pids) >= 2, "six concurrent calls need more than one instance of concurrency 2"


async def test_a_new_version_rolls_out_and_versions_are_immutable(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        v1 = {"name": "greet", "source": "def handle(e, c):\n    return 'v1'\n", "handler": "handle"}
        first = await _register(api, v1)
        assert first["version"] == 1
        status, again = await api.call("POST", "/v1/functions", v1)
        assert status == 200 and again["version"] == 1, "same content is not a new version"
        assert (await _invoke(api, "greet"))[1] == "v1"
        v2 = {**v1, "source": "def handle(e, c):\n    return 'v2'\n"}
        second = await _register(api, v2)
        assert second["version"] == 2 and second["versions"] == [1, 2]
        assert (await _invoke(api, "greet"))[1] == "v2"
        assert (await _invoke(api, "greet", version=1))[1] == "v1"
        status, conflict = await api.call("POST", "/v1/functions", {**v2, "version": 1})
        assert status == 409 and conflict["error"]["field"] == "version"
        await _invoke(api, "greet")
        pool = agents[0].agent.functions
        await wait_for(
            lambda: _value({i.code.version for i in pool.instances.values() if i.code.name == "greet"}),
            lambda versions: versions == {2},
        )


async def test_without_keep_alive_idle_instances_are_evicted_and_the_next_call_is_cold(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="no-keepalive") as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, ECHO)
        assert (await _invoke(api, "echo", 1))[2]["X-Edgeplane-Cold-Start"] == "true"
        pool = agents[0].agent.functions
        await wait_for(lambda: _value(len(pool.instances)), lambda n: n == 0, timeout=5)
        assert pool.counters["evictions"] >= 1
        assert (await _invoke(api, "echo", 2))[2]["X-Edgeplane-Cold-Start"] == "true"


class _PrewarmSoon:
    """A keep-alive policy that always unloads and pre-warms 0.6 s later (to test the mechanism)."""

    name = "prewarm-soon"

    def observe_invocation(self, function_id, t_s, duration_s=0.0, *, concurrency=1):
        return None

    def keep_alive_s(self, function_id):
        return 30.0

    def prewarm_after_s(self, function_id):
        return 0.6

    def release_window(self, function_id, t_s, *, idle_instances=0):
        return Window(prewarm_s=0.6, keep_alive_s=30.0)


async def test_the_policy_prewarms_an_instance_before_the_predicted_arrival(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        running.hub.functions.policy = Policy(name="prewarm-soon", keepalive=_PrewarmSoon())
        await _register(api, ECHO)
        assert (await _invoke(api, "echo", 1))[2]["X-Edgeplane-Cold-Start"] == "true"
        pool = agents[0].agent.functions
        await wait_for(lambda: _value(len(pool.instances)), lambda n: n == 0, timeout=5)
        await wait_for(
            lambda: _value([i.state for i in pool.instances.values()]), lambda s: s == ["idle"], timeout=5
        )
        assert running.hub.functions.counters["prewarms"] == 1
        assert (await _invoke(api, "echo", 2))[2]["X-Edgeplane-Cold-Start"] == "false"


SLEEPY = {
    "name": "sleepy",
    "source": "import time\ndef handle(event, context):\n    time.sleep(event)\n    return event\n",
    "handler": "handle",
}


@pytest.mark.parametrize("policy", ["edgeplane", "edgeplane-no-headroom"])
async def test_a_call_that_overlaps_a_running_one_finds_a_spare_started_for_it(
    nats_server, sqlite_url, tmp_path, policy
):
    """Headroom: the first call takes the only instance and (the prior says arrivals may overlap)
    starts a spare beside it; a second call while the first still runs is served warm at once.
    Without headroom the second call starts cold or queues behind the first."""
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy=policy) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, SLEEPY)
        first = asyncio.ensure_future(_invoke(api, "sleepy", 8))
        pool = agents[0].agent.functions
        await wait_for(
            lambda: _value([i.state for i in pool.instances.values()]), lambda s: "busy" in s, timeout=10
        )
        # Give a spare, if one was asked for, the time to start (bounded either way).
        with contextlib.suppress(AssertionError):
            await wait_for(
                lambda: _value([i.state for i in pool.instances.values()]), lambda s: "idle" in s, timeout=2
            )
        assert not first.done(), "the first call must still run when the second arrives"
        status, _, headers = await _invoke(api, "sleepy", 0)
        assert status == 200
        served_at_once = (
            headers["X-Edgeplane-Cold-Start"] == "false" and float(headers["X-Edgeplane-Queue-Ms"]) < 1000
        )
        status, _, first_headers = await asyncio.wait_for(first, timeout=30)
        assert status == 200 and first_headers["X-Edgeplane-Cold-Start"] == "true"
        if policy == "edgeplane":
            assert served_at_once, headers
            # One for each call that took the last free instance (the second took the spare).
            assert running.hub.functions.counters["spares"] >= 1
        else:
            assert not served_at_once, headers
            assert running.hub.functions.counters["spares"] == 0


async def test_an_explicit_prewarm_makes_the_first_call_warm(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, ECHO)
        ack = await running.hub.functions.prewarm("echo")
        assert ack is not None and ack.started == 1
        pool = agents[0].agent.functions
        await wait_for(
            lambda: _value([i.state for i in pool.instances.values()]), lambda s: s == ["idle"], timeout=5
        )
        assert (await _invoke(api, "echo", 1))[2]["X-Edgeplane-Cold-Start"] == "false"


async def test_a_forecast_of_the_next_bin_prewarms_an_instance_before_its_arrival(
    nats_server, sqlite_url, tmp_path
):
    """No keep-alive at all (every instance goes as its call ends), one call in the middle of
    each 1 s bin: the calls are cold until the forecast (the seasonal baseline over the closed
    bins) gives the next bin a 50 % chance of a call; from then on each bin's start has an
    instance started for it, and its call is warm."""
    config = ForecastPrewarmConfig(forecaster="seasonal", bin_s=1.0, period_bins=60)
    loop = asyncio.get_running_loop()
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, ECHO)
        functions = running.hub.functions
        forecast = LiveForecast(config)
        functions.policy = Policy("none-forecast", FixedKeepAlive(0.0, name="none"), live_forecast=forecast)
        cold = []
        for i in range(10):
            await asyncio.sleep(math.floor(loop.time()) + 1.5 - loop.time())  # mid-bin of the next bin
            cold.append((await _invoke(api, "echo", i))[2]["X-Edgeplane-Cold-Start"] == "true")
        pool = agents[0].agent.functions
        assert pool.counters["evictions"] >= 5  # no instance outlived its call
        assert cold[:2] == [True, True], cold  # before the forecast has seen two bins
        assert cold[-5:] == [False] * 5, cold
        # Each warm call found an instance the forecast had started (not one left over).
        assert functions.counters["forecast_prewarms"] >= cold.count(False), functions.counters
        assert functions.counters["prewarms"] == 0


async def test_battery_nodes_get_cold_starts_last_and_shorter_keep_alives(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="fixed-10m") as (_, api),
        running_agents(nats_server.url, tmp_path, ["mains", "battery"], **PYTHON_FUNCTIONS) as agents,
    ):
        write_power_supply(agents[1].power_dir, on_battery=True, percent=40)
        await wait_for(lambda: api.get("/v1/nodes/battery"), lambda n: n["power"]["source"] == "battery")
        await _register(api, {**ECHO, "max_concurrency": 1})
        _, _, headers = await _invoke(api, "echo", 1)
        assert headers["X-Edgeplane-Node"] == "mains"
        await _register(
            api,
            {
                "name": "pinned",
                **{k: ECHO[k] for k in ("source", "handler")},
                "affinity": {"nodes": ["battery"]},
            },
        )
        _, _, headers = await _invoke(api, "pinned", 1)
        assert headers["X-Edgeplane-Node"] == "battery"
        keep = {
            h.agent.config.name: [i.keep_alive_s for i in h.agent.functions.instances.values()]
            for h in agents
        }
        assert keep["mains"] == [600.0] and keep["battery"] == [300.0]


async def test_async_invocations_are_polled_to_their_result(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        await _register(api, ECHO)
        status, body, _ = await _invoke(api, "echo", {"later": 1}, **{"async": 1})
        assert status == 202 and body["status"] == "Queued"
        done = await wait_for(
            lambda: api.get(f"/v1/invocations/{body['invocation_id']}"),
            lambda i: i["status"] in ("Succeeded", "Failed"),
        )
        assert done["status"] == "Succeeded" and done["result"] == {"later": 1} and done["node"] == "f1"
        status, missing = await api.call("GET", "/v1/invocations/nope")
        assert status == 404 and missing["error"]["field"] == "id"


async def test_an_agent_dying_mid_invocation_fails_it_clearly_instead_of_hanging(
    nats_server, sqlite_url, tmp_path
):
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_agent.cli",
            "run",
            "--nats",
            nats_server.url,
            "--name",
            "doomed",
            "--heartbeat-interval",
            "0.25",
            "--work-dir",
            str(tmp_path / "doomed"),
            "--log-level",
            "WARNING",
            *(["--run-as", PYTHON_FUNCTIONS["run_as"]] if PYTHON_FUNCTIONS else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # No eviction grace: a silent node is presumed dead at once (by default the invocation
        # waits up to 30 s for its node to be heard again; see the frozen-agent test).
        async with running_hub(nats_server.url, sqlite_url, federation=no_eviction_grace()) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            await _register(
                api,
                {
                    "name": "long",
                    "source": "import time\ndef handle(e, c):\n    time.sleep(60)\n",
                    "handler": "handle",
                    "timeout_s": 120,
                },
            )
            call = asyncio.create_task(_invoke(api, "long"))
            await asyncio.sleep(1.5)
            agent.kill()
            started = time.monotonic()
            status, body, _ = await asyncio.wait_for(call, timeout=15)
            assert status == 502 and body["error"]["code"] == "agent_lost"
            assert time.monotonic() - started < 10
            status, body, _ = await _invoke(api, "long")
            assert status == 503 and body["error"]["code"] == "no_capacity"
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait(timeout=10)


async def test_an_invocation_on_a_node_that_is_only_cut_off_for_a_while_gets_its_answer(
    nats_server, sqlite_url, tmp_path
):
    """Was: 502 agent_lost as soon as the node's lease expired, though the function ran to its end
    there (the chaos run's partition scenario: a result thrown away). Now the hub waits for the
    answer while the cluster holds the silent node's work (the eviction grace, 30 s by default)."""
    agent = spawn_agent(nats_server.url, "frozen", tmp_path, run_as=PYTHON_FUNCTIONS.get("run_as"))
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            source = "import time\ndef handle(e, c):\n    time.sleep(3)\n    return {'slept': e}\n"
            await _register(api, {"name": "nap", "source": source, "handler": "handle", "timeout_s": 20})
            call = asyncio.create_task(_invoke(api, "nap", 5))
            await asyncio.sleep(1.0)  # running on the node now
            agent.send_signal(signal.SIGSTOP)  # silent: heartbeats stop, the worker goes on
            await wait_for(lambda: api.get("/v1/nodes/frozen"), lambda n: n["status"] == "NotReady")
            await asyncio.sleep(2.5)
            assert not call.done(), "gave up on a node that is only silent"
            agent.send_signal(signal.SIGCONT)
            status, body, _ = await asyncio.wait_for(call, timeout=20)
            assert (status, body) == (200, {"slept": 5})
    finally:
        with contextlib.suppress(ProcessLookupError):
            agent.send_signal(signal.SIGCONT)
        if agent.poll() is None:
            agent.terminate()
        agent.wait(timeout=10)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "f", "source": "def handle(e, c):\n    return 1\n"}, "handler"),
        ({"name": "f", "source": "def handle(e, c):\n    return 1\n", "handler": "other"}, "handler"),
        ({"name": "f", "source": "def handle(:\n", "handler": "handle"}, "source"),
        ({"name": "f", "handler": "handle"}, "handler"),
        ({**ECHO, "memory": "lots"}, "memory"),
        ({**ECHO, "memory": "1Mi"}, "memory"),
        ({**ECHO, "timeout_s": 0}, "timeout_s"),
        ({**ECHO, "max_concurrency": 0}, "max_concurrency"),
        ({**ECHO, "runtime": "java"}, "runtime"),
        ({**ECHO, "version": -1}, "version"),
        ({**ECHO, "name": "Bad Name"}, "name"),
        ({"name": "c", "runtime": "command"}, "command"),
        ({**ECHO, "mig": "9g.99gb"}, "mig"),
        ({**ECHO, "affinity": {"clusters": ["nowhere"]}}, "affinity.clusters"),
        ({**ECHO, "colour": "blue"}, "colour"),
    ],
)
async def test_bad_registrations_get_422_naming_the_field(nats_server, sqlite_url, body, field):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, reply = await api.call("POST", "/v1/functions", body)
        assert status == 422, reply
        assert reply["error"]["field"] == field


async def test_unknown_functions_get_404(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, body, _ = await _invoke(api, "ghost")
        assert status == 404 and body["error"]["field"] == "name"
        status, body = await api.call("GET", "/v1/functions/ghost")
        assert status == 404


async def _value(value):
    return value


async def test_an_idempotency_key_makes_a_retried_invocation_the_same_one(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    """A client that retries (a timeout, a dropped connection) must not run the function twice."""
    source = (
        "import os, time\ndef handle(event, context):\n"
        "    with open(os.path.join(event['dir'], 'runs'), 'a') as f:\n        f.write('run\\n')\n"
        "    time.sleep(event.get('sleep', 0))\n    return {'n': event['n']}\n"
    )
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        await _register(api, {"name": "once", "source": source, "handler": "handle"})
        event = {"dir": str(shared_dir), "n": 1}
        headers = {"Idempotency-Key": "order-42"}
        first = await api.session.post(api.base + "/v1/functions/once/invoke", json=event, headers=headers)
        assert first.status == 200 and await first.json() == {"n": 1}
        again = await api.session.post(
            api.base + "/v1/functions/once/invoke", json={**event, "n": 2}, headers=headers
        )
        assert again.status == 200 and await again.json() == {"n": 1}  # the first answer, replayed
        assert again.headers["X-Edgeplane-Idempotent-Replay"] == "true"
        invocation = await api.get(f"/v1/invocations/{first.headers['X-Edgeplane-Invocation-Id']}")
        assert invocation["status"] == "Succeeded" and invocation["result"] == {"n": 1}
        # Asynchronous: the retry gets the same invocation (200), not a new one (202).
        headers = {"Idempotency-Key": "order-43"}
        slow = {**event, "n": 3, "sleep": 1}
        path = "/v1/functions/once/invoke?async=1"
        status, queued = await api.call("POST", path, slow, headers=headers)
        assert status == 202
        status, retried = await api.call("POST", path, slow, headers=headers)
        assert status == 200 and retried["invocation_id"] == queued["invocation_id"]
        # A synchronous retry while the first is still running is a 409 naming the header.
        status, busy = await api.call("POST", "/v1/functions/once/invoke", slow, headers=headers)
        assert status == 409 and busy["error"]["field"] == "Idempotency-Key"
        await wait_for(lambda: api.get(queued["poll"]), lambda i: i["status"] == "Succeeded")
        assert (shared_dir / "runs").read_text().count("run") == 2  # order-42 once, order-43 once
        status, bad = await api.call(
            "POST", "/v1/functions/once/invoke", event, headers={"Idempotency-Key": ""}
        )
        assert status == 422 and bad["error"]["field"] == "Idempotency-Key"


async def test_a_retry_of_an_invocation_that_never_started_runs_it(nats_server, sqlite_url, tmp_path):
    """An Idempotency-Key keeps no answer for an invocation that ran nowhere (503 no_capacity): the
    client's retry under the same key runs it, once, when there is capacity."""
    source = "def handle(event, context):\n    return {'n': event}\n"
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        await _register(api, {"name": "later", "source": source, "handler": "handle"})
        headers = {"Idempotency-Key": "retry-me"}
        status, body = await api.call("POST", "/v1/functions/later/invoke", 1, headers=headers)
        assert status == 503 and body["error"]["code"] == "no_capacity"
        async with running_agents(nats_server.url, tmp_path, ["n1"], **PYTHON_FUNCTIONS):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            again = await api.session.post(api.base + "/v1/functions/later/invoke", json=1, headers=headers)
            assert again.status == 200 and await again.json() == {"n": 1}
            assert "X-Edgeplane-Idempotent-Replay" not in again.headers
            replay = await api.session.post(api.base + "/v1/functions/later/invoke", json=1, headers=headers)
            assert replay.status == 200 and replay.headers["X-Edgeplane-Idempotent-Replay"] == "true"
            assert replay.headers["X-Edgeplane-Invocation-Id"] == again.headers["X-Edgeplane-Invocation-Id"]
            # Where an instance fits is the scheduler's filters' answer, and its reason is the user's.
            await _register(api, {"name": "huge", "source": source, "handler": "handle", "memory": "64Ti"})
            status, body = await api.call("POST", "/v1/functions/huge/invoke", 1)
            assert status == 503 and body["error"]["code"] == "no_capacity"
            assert "0/1 nodes are available: 1 node has too little memory" in body["error"]["message"]


async def test_deleting_a_function_stops_its_warm_instances_on_the_nodes(nats_server, sqlite_url, tmp_path):
    """Warm workers of a deleted function go at once, not when their keep-alive runs out."""
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="fixed-10m") as (hub, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, ECHO)
        status, _, _ = await _invoke(api, "echo", 1)
        assert status == 200
        pool = agents[0].agent.functions
        assert [i.code.name for i in pool.instances.values()] == ["echo"]
        pids = [i.process.pid for i in pool.instances.values()]
        status, _ = await api.call("DELETE", "/v1/functions/echo")
        assert status in (200, 202)
        await wait_for(lambda: _async(len(pool.instances)), lambda n: n == 0, timeout=10)
        for pid in pids:
            await wait_for(lambda pid=pid: _async(_alive(pid)), lambda alive: not alive, timeout=10)
        # The hub forgets them at the next heartbeat.
        await wait_for(lambda: _async(hub.hub.functions.instances.get("f1", {})), lambda known: not known)


async def _async(value):
    return value


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


async def test_a_restarted_hub_keeps_what_the_keep_alive_policy_learned(nats_server, sqlite_url, tmp_path):
    """The policy's state lives in the hub's memory; the invocations live in the store. A hub
    that starts on the store (a restart, a standby taking over) replays them: same histogram,
    not the empty policy a new hub would begin with."""

    async def node_ready(api) -> None:
        await wait_for(
            lambda: api.call("GET", "/v1/nodes"),
            lambda r: [n["status"] for n in r[1]["items"]] == ["Ready"],
            timeout=15,
        )

    async with running_agents(nats_server.url, tmp_path, ["f1"], wait_registered=False, **PYTHON_FUNCTIONS):
        async with running_hub(nats_server.url, sqlite_url) as (first, api):
            await node_ready(api)
            await _register(api, {**ECHO, "memory": "128Mi"})
            for i in range(6):
                status, _, _ = await _invoke(api, "echo", {"i": i})
                assert status == 200
                await asyncio.sleep(0.05)
            learned = first.hub.functions.policy.keepalive.hybrid.histogram("echo")
            before = (list(learned.counts), learned.n_oob)
            assert learned.total == 5  # six arrivals, five idle times
        async with running_hub(nats_server.url, sqlite_url) as (second, api):
            await asyncio.wait_for(second.hub.functions.replayed.wait(), timeout=10)
            kept = second.hub.functions.policy.keepalive.hybrid.histogram("echo")
            assert (list(kept.counts), kept.n_oob) == before
            await node_ready(api)
            status, _, _ = await _invoke(api, "echo", {"i": 6})
            assert status == 200 and kept.total == 6  # and it goes on learning
