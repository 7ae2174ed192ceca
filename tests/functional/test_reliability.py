"""Nothing lost, nothing run twice: a NATS outage is not a node failure, and a late success wins.

Issue 11, finding 1: with the hub's own NATS connection down, leases must not expire (before,
a 5 s outage marked every running placement Lost and ran it again); a replica that finished on a
node the hub had given up on counts, and its re-placement is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from harness import (
    PYTHON_FUNCTIONS,
    no_eviction_grace,
    register_message,
    running_agents,
    running_hub,
    spawn_agent,
    wait_for,
)
from tcp_cut import CuttableRelay

from edgeplane_contract.messages import PlacementState, StatusReportV1

from controlplane.federation.config import ClusterConfig, FederationConfig
from controlplane.natsd import NatsServer, free_port

# Appends a line to $OUT/<workload id> when it starts: the count is how often it ran.
MARKED = ["sh", "-c", 'echo started >> "$OUT/$EDGEPLANE_WORKLOAD_ID"; sleep 3']


def _runs(folder: Path, workload_id: str) -> int:
    path = folder / workload_id
    return path.read_text().count("started") if path.exists() else 0


async def test_a_nats_outage_longer_than_the_lease_loses_nothing_and_runs_nothing_twice(
    sqlite_url, tmp_path, shared_dir
):
    port = free_port()
    server = NatsServer(port=port).start()
    try:
        # Leases of 4 x 0.25 s = 1 s; the outage lasts 3 s, so every lease would expire.
        async with (
            running_hub(server.url, sqlite_url) as (running, api),
            running_agents(server.url, tmp_path, ["o1", "o2"]),
        ):
            ids = [
                await api.post_workload(
                    {"name": f"outage-{i}", "command": MARKED, "env": {"OUT": str(shared_dir)}}
                )
                for i in range(2)
            ]
            for workload_id in ids:
                await api.wait_status(workload_id, "Running")
            server.stop()
            await asyncio.sleep(3.0)
            assert running.hub.bus.hearing_since("default") is None
            assert all(n.status == "Ready" for n in running.hub.nodes.values()), "leases were held"
            server = NatsServer(port=port).start()
            for workload_id in ids:
                done = await api.wait_status(workload_id, "Succeeded", timeout=30)
                assert [p["status"] for p in done["placements"]] == ["Succeeded"], done["placements"]
                assert _runs(shared_dir, workload_id) == 1
            events = (await api.get("/v1/events?kind=PlacementLost"))["items"]
            assert events == []
            nodes = await wait_for(
                lambda: api.get("/v1/nodes"), lambda n: all(x["status"] == "Ready" for x in n["items"])
            )
            assert len(nodes["items"]) == 2
    finally:
        server.stop()


def _report(node: str, placement: dict, workload_id: str, state: str) -> StatusReportV1:
    return StatusReportV1(
        report_id=uuid.uuid4().hex,
        node=node,
        placement=PlacementState(
            placement_id=placement["id"], workload_id=workload_id, state=state, exit_code=0
        ),
    )


def _placed(workload: dict) -> bool:
    return bool(workload["placements"])


async def _lose(running, name: str) -> None:
    """Make the hub give up on node ``name``: as if it had heard nothing from it for an hour while
    its own NATS connection was up all along."""
    running.hub.nodes[name].last_seen -= 3600
    bus = running.hub.bus
    bus._up_since = {url: since - 3600 for url, since in bus._up_since.items() if since is not None}
    await running.hub.reconcile_once()


async def test_a_late_success_wins_over_the_re_placement_unless_that_has_started(nats_server, sqlite_url):
    # Nodes a and b are registered by hand and never heartbeat: a long lease keeps them Ready.
    federation = no_eviction_grace()  # a lost node's work is placed again at once
    async with running_hub(nats_server.url, sqlite_url, federation, lease_missed_heartbeats=400) as (
        running,
        api,
    ):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a"))).accepted
        late = {"name": "late", "command": ["true"]}  # only a exists yet
        workload_id = await api.post_workload(late)
        first = (await wait_for(lambda: api.workload(workload_id), _placed))["placements"][0]
        await hub.handle_report("a", _report("a", first, workload_id, "Running"))
        await _lose(running, "a")
        lost = await api.workload(workload_id)
        assert lost["placements"][0]["status"] == "Lost" and lost["status"] == "Pending"
        # Node b appears; the replica is placed again there (not started: b never acks).
        assert (await hub.handle_register("b", register_message("b"))).accepted
        again = await wait_for(
            lambda: api.workload(workload_id), lambda w: any(p["node"] == "b" for p in w["placements"])
        )
        assert [p["status"] for p in again["placements"] if p["node"] == "b"] == ["Scheduled"]
        # a was only unreachable: its Succeeded arrives late, and wins.
        await hub.handle_report("a", _report("a", first, workload_id, "Succeeded"))
        done = await api.workload(workload_id)
        assert done["status"] == "Succeeded", done
        assert {p["node"]: p["status"] for p in done["placements"]}["a"] == "Succeeded"
        events = [e["message"] for e in (await api.get(f"/v1/events?object_id={workload_id}"))["items"]]
        won = [m for m in events if "finished while its node was unreachable" in m]
        assert won and "re-placement on b cancelled" in won[0], events

        # The same again, but the re-placement has started: the late success is ignored.
        other = await api.post_workload({**late, "name": "late-2", "affinity": {"nodes": ["b"]}})
        first = (await wait_for(lambda: api.workload(other), _placed))["placements"][0]
        await hub.handle_report("b", _report("b", first, other, "Running"))
        await _lose(running, "b")
        assert (await hub.handle_register("b", register_message("b"))).accepted  # b is back, rebooted
        retried = await wait_for(lambda: api.workload(other), lambda w: len(w["placements"]) == 2)
        second = retried["placements"][1]
        await hub.handle_report("b", _report("b", second, other, "Running"))
        await hub.handle_report("b", _report("b", first, other, "Succeeded"))
        still = await api.workload(other)
        assert still["status"] == "Running" and still["placements"][0]["status"] == "Lost", still


async def test_an_async_invocation_that_finished_while_the_hub_was_down_shows_its_result(
    nats_server, sqlite_url, tmp_path
):
    """Issue 11, finding 2: a restarted hub marked every running async invocation Failed
    (hub_restarted) without asking the agents, though they had finished, and their results were
    lost."""
    source = "import time\ndef handle(event, context):\n    time.sleep(2)\n    return {'done': event}\n"
    async with running_agents(nats_server.url, tmp_path, ["f1"], wait_registered=False, **PYTHON_FUNCTIONS):
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            path = await _running_async_invocation(api, source, 7)
        await asyncio.sleep(2.5)  # the hub is gone; the invocation finishes on the agent meanwhile
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            done = await wait_for(
                lambda: api.get(path), lambda i: i["status"] in ("Succeeded", "Failed"), timeout=20
            )
            assert done["status"] == "Succeeded", done
            assert done["result"] == {"done": 7} and done["node"] == "f1"


async def test_an_invocation_sent_while_nats_restarts_waits_for_it_and_runs_once(sqlite_url, tmp_path):
    """Was: 503 unavailable at once while the hub's NATS connection was down (the chaos run's
    "unavailable" failures). Now the invocation waits for the connection (within its budget) and
    runs once."""
    port = free_port()
    server = NatsServer(port=port).start()
    source = "def handle(event, context):\n    return {'got': event}\n"
    try:
        async with (
            running_hub(server.url, sqlite_url) as (running, api),
            running_agents(server.url, tmp_path, ["w1"], **PYTHON_FUNCTIONS),
        ):
            body = {"name": "echo", "source": source, "handler": "handle", "timeout_s": 10}
            assert (await api.call("POST", "/v1/functions", body))[0] == 201
            assert (await api.call("POST", "/v1/functions/echo/invoke", 1))[0] == 200
            server.stop()
            await wait_for(lambda: _async(running.hub.bus.hearing_since("default") is None), bool)
            call = asyncio.ensure_future(api.call("POST", "/v1/functions/echo/invoke", 2))
            await asyncio.sleep(2.0)
            assert not call.done(), "answered while NATS was down"
            server = NatsServer(port=port).start()
            status, answer = await asyncio.wait_for(call, timeout=20)
            assert (status, answer) == (200, {"got": 2})
            stats = await api.get("/v1/functions/echo")
            assert stats["stats"]["invocations"] == 2, stats
    finally:
        server.stop()


async def test_an_answer_sent_while_the_hubs_connection_was_down_is_asked_for_when_it_is_back(
    nats_server, sqlite_url, tmp_path
):
    """NATS keeps nothing for an absent subscriber: an agent's answer sent while the hub's own
    connection is down is gone. Was: the invocation waited out its whole budget (timeout + 30 s)
    before asking the node. Now the hub asks the node as soon as its connection is back."""
    relay = await CuttableRelay("127.0.0.1", nats_server.port).start()
    source = "import time\ndef handle(event, context):\n    time.sleep(2)\n    return {'got': event}\n"
    try:
        async with (
            running_hub(relay.url, sqlite_url) as (running, api),
            running_agents(nats_server.url, tmp_path, ["r1"], **PYTHON_FUNCTIONS),
        ):
            body = {"name": "slow", "source": source, "handler": "handle", "timeout_s": 10}
            assert (await api.call("POST", "/v1/functions", body))[0] == 201
            assert (await api.call("POST", "/v1/functions/slow/invoke", 0))[0] == 200  # warm
            call = asyncio.ensure_future(api.call("POST", "/v1/functions/slow/invoke", 1, timeout_s=60))
            await asyncio.sleep(0.5)
            relay.cut()  # the hub alone cannot hear; the agent answers into the void at ~2 s
            await wait_for(lambda: _async(running.hub.bus.hearing_since("default") is None), bool)
            await asyncio.sleep(3.0)
            assert not call.done(), "answered while the hub could not hear"
            relay.heal()
            healed = asyncio.get_running_loop().time()
            status, answer = await asyncio.wait_for(call, timeout=30)
            assert (status, answer) == (200, {"got": 1})
            waited = asyncio.get_running_loop().time() - healed
            assert waited < 10, f"answered {waited:.1f}s after the connection was back"
            functions = running.hub.functions
            assert functions.counters["answers_recovered"] == 1
    finally:
        await relay.close()


async def _running_async_invocation(api, source: str, event: int) -> str:
    """Register ``source`` as function "slow", invoke it asynchronously and wait until it runs on
    the agent; the invocation's path."""
    # The agents were started before this hub: an invocation before one registers finds no node.
    await wait_for(api.nodes, lambda nodes: bool(nodes) and all(n["status"] == "Ready" for n in nodes))
    body = {"name": "slow", "source": source, "handler": "handle", "timeout_s": 30}
    assert (await api.call("POST", "/v1/functions", body))[0] == 201
    status, queued = await api.call("POST", "/v1/functions/slow/invoke?async=1", event)
    assert status == 202
    path = f"/v1/invocations/{queued['invocation_id']}"
    await wait_for(lambda: api.get(path), lambda i: i["status"] == "Running")
    await asyncio.sleep(0.5)  # on the agent now
    return path


async def _async(value: bool) -> bool:
    return value


async def test_an_invocation_result_outlives_a_restart_of_both_the_agent_and_the_hub(
    nats_server, sqlite_url, tmp_path
):
    """The agent's record of finished invocations is on disk: a result survives the agent's restart
    while the hub was away (in memory only, the restarted hub failed it: hub_restarted)."""
    source = "import time\ndef handle(event, context):\n    time.sleep(1.5)\n    return {'done': event}\n"
    async with running_agents(nats_server.url, tmp_path, ["r1"], wait_registered=False, **PYTHON_FUNCTIONS):
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            path = await _running_async_invocation(api, source, 8)
        await asyncio.sleep(2.0)  # the hub is gone; the invocation finishes on the agent meanwhile
    assert (tmp_path / "agents" / "r1" / "invocations.sqlite3").stat().st_mode & 0o777 == 0o600
    # A new agent process on the same work dir, then a new hub.
    async with running_agents(nats_server.url, tmp_path, ["r1"], wait_registered=False, **PYTHON_FUNCTIONS):
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            done = await wait_for(
                lambda: api.get(path), lambda i: i["status"] in ("Succeeded", "Failed"), timeout=20
            )
            assert done["status"] == "Succeeded", done
            assert done["result"] == {"done": 8} and done["node"] == "r1"


def _silence(running, *names: str, for_s: float) -> None:
    """As if the hub, hearing fine, had heard nothing from ``names`` for ``for_s`` beyond their lease."""
    bus = running.hub.bus
    bus._up_since = {url: since - 3600 for url, since in bus._up_since.items() if since is not None}
    for name in names:
        live = running.hub.nodes[name]
        live.last_seen -= live.lease_now + for_s  # its lease (and startup grace, if not heard yet)


def _first_lost(workload: dict) -> bool:
    return workload["placements"][0]["status"] == "Lost"


def _heard(running, *names: str) -> None:
    """As if ``names`` had just heartbeated (what handle_heartbeat does to the hub's view)."""
    for name in names:
        live = running.hub.nodes[name]
        live.last_seen = asyncio.get_running_loop().time()
        live.status, live.held, live.startup_s = "Ready", False, 0.0


@contextlib.asynccontextmanager
async def _four_nodes_three_running(
    nats_server: Any, sqlite_url: str, *, autonomy_s: float, grace_s: float
) -> AsyncIterator[tuple[Any, Any, dict[str, str]]]:
    """A hub (leases that never expire by themselves: the test silences nodes) with nodes a-d
    registered and a workload Running on each of a, b and c (their ids by node)."""
    cluster = ClusterConfig(
        name="default", region="local", autonomy_window_s=autonomy_s, eviction_grace_s=grace_s
    )
    federation = FederationConfig(clusters=[cluster], default_cluster="default")
    async with running_hub(nats_server.url, sqlite_url, federation, lease_missed_heartbeats=400) as (
        running,
        api,
    ):
        hub = running.hub
        for name in ("a", "b", "c", "d"):
            assert (await hub.handle_register(name, register_message(name))).accepted
        ids = {}
        for name in ("a", "b", "c"):
            ids[name] = await api.post_workload(
                {"name": f"on-{name}", "command": ["true"], "affinity": {"nodes": [name]}}
            )
            placement = (await wait_for(lambda n=name: api.workload(ids[n]), _placed))["placements"][0]
            await hub.handle_report(name, _report(name, placement, ids[name], "Running"))
        yield running, api, ids


async def test_a_partition_holds_the_silent_nodes_work_for_the_autonomy_window(nats_server, sqlite_url):
    """A majority of a cluster silent at once is a partition, not four dead nodes: their work is
    held (the nodes keep serving locally) and placed again only after the autonomy window."""
    async with _four_nodes_three_running(nats_server, sqlite_url, autonomy_s=3.0, grace_s=0) as (
        running,
        api,
        ids,
    ):
        hub = running.hub
        _silence(running, "a", "b", "c", for_s=0.5)  # 3 of 4 at once
        await hub.reconcile_once()
        nodes = {n["name"]: n["status"] for n in await api.nodes()}
        assert nodes == {"a": "NotReady", "b": "NotReady", "c": "NotReady", "d": "Ready"}
        for name in ("a", "b", "c"):
            held = await api.workload(ids[name])
            assert held["status"] == "Running" and held["placements"][0]["status"] == "Running", held
        _heard(running, "c")  # c is heard again within the window: its work simply goes on
        # Past the window, a and b are given up on: their work is Lost and placed again.
        for name in ("a", "b"):
            await wait_for(
                lambda n=name: api.workload(ids[n]), lambda w: w["placements"][0]["status"] == "Lost"
            )
        assert (await api.workload(ids["c"]))["placements"][0]["status"] == "Running"

        # One silent node of four is not a partition: its work is Lost at once.
        _heard(running, "a", "b")
        other = await api.post_workload({"name": "on-d", "command": ["true"], "affinity": {"nodes": ["d"]}})
        placement = (await wait_for(lambda: api.workload(other), _placed))["placements"][0]
        await hub.handle_report("d", _report("d", placement, other, "Running"))
        _silence(running, "d", for_s=0.5)
        await hub.reconcile_once()
        assert (await api.workload(other))["placements"][0]["status"] == "Lost"


async def test_a_node_that_went_silent_just_before_its_partition_keeps_its_work_held_with_it(
    nats_server, sqlite_url
):
    """Leases of a site's nodes expire a heartbeat apart when its uplink goes down: the first is
    alone (held by the eviction grace), then the others make it a partition, and from then on the
    first is held for the autonomy window too, not lost when its grace ends."""
    async with _four_nodes_three_running(nats_server, sqlite_url, autonomy_s=60.0, grace_s=1.0) as (
        running,
        api,
        ids,
    ):
        hub = running.hub
        _silence(running, "a", for_s=0.5)  # alone: 1 of 4, held by the grace (1 s)
        await hub.reconcile_once()
        assert hub.nodes["a"].held and hub.nodes["a"].hold_s == 1.0
        _silence(running, "b", "c", for_s=0.0)  # then the others: 3 of 4, a partition
        await hub.reconcile_once()
        assert hub.nodes["a"].hold_s == 60.0
        await asyncio.sleep(1.2)  # past a's grace
        await hub.reconcile_once()
        for name in ("a", "b", "c"):
            held = await api.workload(ids[name])
            assert held["placements"][0]["status"] == "Running", (name, held)


async def test_a_final_report_survives_an_agent_restart_and_the_work_does_not_run_again(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    """The outbox is durable: a workload that finished while the hub was away, on an agent that was
    then killed, is Succeeded when both come back, not Lost and run again."""
    agent = spawn_agent(nats_server.url, "d1", tmp_path)
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            body = {"name": "short", "command": MARKED, "env": {"OUT": str(shared_dir)}}
            workload_id = await api.post_workload(body)
            await api.wait_status(workload_id, "Running")
        await asyncio.sleep(4)  # the hub is gone; the workload (3 s) finishes; its report waits
        agent.kill()  # and the agent dies with the report unsent
        agent.wait(timeout=5)
        assert (tmp_path / "d1" / "outbox.sqlite3").exists()
        agent = spawn_agent(nats_server.url, "d1", tmp_path)
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            done = await api.wait_status(workload_id, "Succeeded", "Pending", "Scheduled", timeout=20)
            assert done["status"] == "Succeeded", done
            assert [p["status"] for p in done["placements"]] == ["Succeeded"]
            await asyncio.sleep(1.0)
            assert _runs(shared_dir, workload_id) == 1
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)


async def test_with_an_eviction_grace_a_silent_nodes_work_waits_before_it_is_placed_again(
    nats_server, sqlite_url
):
    cluster = ClusterConfig(name="default", region="local", eviction_grace_s=2.0)
    federation = FederationConfig(clusters=[cluster], default_cluster="default")
    hub_up = running_hub(nats_server.url, sqlite_url, federation, lease_missed_heartbeats=400)
    async with hub_up as (running, api):
        hub = running.hub
        for name in ("a", "b"):
            assert (await hub.handle_register(name, register_message(name))).accepted
        body = {"name": "graced", "command": ["true"], "affinity": {"nodes": ["a"]}}
        workload_id = await api.post_workload(body)
        placement = (await wait_for(lambda: api.workload(workload_id), _placed))["placements"][0]
        await hub.handle_report("a", _report("a", placement, workload_id, "Running"))
        _silence(running, "a", for_s=0.2)
        await hub.reconcile_once()
        assert (await api.get("/v1/nodes/a"))["status"] == "NotReady"
        assert (await api.workload(workload_id))["placements"][0]["status"] == "Running"  # held
        await wait_for(lambda: api.workload(workload_id), _first_lost, timeout=10)
