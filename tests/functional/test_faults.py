"""Faults are normal: dead agents, NATS restarts, hub restarts, duplicates and garbage on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import nats
from harness import no_eviction_grace, running_agents, running_hub, spawn_agent, wait_for

from edgeplane_contract.messages import (
    CommandAckV1,
    CommandV1,
    PlacementState,
    RunSpec,
    StatusReportV1,
    Subjects,
    decode,
    encode,
)

from controlplane.natsd import NatsServer, free_port


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is dead.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True


# Writes its pid into $PIDS (a directory the test can read: the agent runs it as another user).
PIDFILE_CMD = ["sh", "-c", 'echo $$ > "$PIDS/$EDGEPLANE_PLACEMENT_ID.pid"; exec sleep 60']


async def test_a_killed_agent_process_goes_not_ready_its_work_dies_with_it_and_is_placed_again(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    agents = [spawn_agent(nats_server.url, name, tmp_path) for name in ("a1", "a2")]
    try:
        async with running_hub(nats_server.url, sqlite_url, federation=no_eviction_grace()) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["status"] == "Ready" for x in n))
            workload_id = await api.post_workload(
                {
                    "name": "long",
                    "command": PIDFILE_CMD,
                    "env": {"PIDS": str(shared_dir)},
                    "resources": {"cpu": 1},
                }
            )
            first = await api.wait_status(workload_id, "Running")
            victim_name = first["node"]
            placement_id = first["placements"][0]["id"]
            pidfile = shared_dir / f"{placement_id}.pid"
            pid = int((await wait_for(lambda: _read(pidfile), bool)).strip())
            victim = agents[0] if victim_name == "a1" else agents[1]
            victim.kill()
            victim.wait(timeout=5)
            node = await wait_for(
                lambda: api.get(f"/v1/nodes/{victim_name}"), lambda n: n["status"] == "NotReady", timeout=10
            )
            assert node["status"] == "NotReady"
            await wait_for(lambda: _async(not alive(pid)), bool, timeout=5)
            moved = await wait_for(
                lambda: api.workload(workload_id),
                lambda w: w["status"] == "Running" and w["node"] != victim_name,
                timeout=10,
            )
            assert [p["status"] for p in moved["placements"]] == ["Lost", "Running"]
            assert moved["placements"][1]["attempt"] == 2
            kinds = [e["kind"] for e in (await api.get("/v1/events?kind=NodeNotReady"))["items"]]
            assert kinds == ["NodeNotReady"]
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=10)


async def test_by_default_a_killed_agents_work_is_held_and_placed_again_once_its_restart_confirms_it_died(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    """The default eviction grace (30 s): a silent node's work is not placed again at its lease
    expiry (it may only be unreachable, and finished work would run twice); the agent's
    registration after its restart confirms what died with it, which is placed again at once."""
    agents = {name: spawn_agent(nats_server.url, name, tmp_path) for name in ("g1", "g2")}
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["status"] == "Ready" for x in n))
            body = {"name": "long", "command": PIDFILE_CMD, "env": {"PIDS": str(shared_dir)},
                    "resources": {"cpu": 1}, "affinity": {"nodes": ["g1"]}}  # fmt: skip
            workload_id = await api.post_workload(body)
            first = await api.wait_status(workload_id, "Running")
            placement_id = first["placements"][0]["id"]
            pid = int((await wait_for(lambda: _read(shared_dir / f"{placement_id}.pid"), bool)).strip())
            agents["g1"].kill()
            agents["g1"].wait(timeout=5)
            await wait_for(lambda: api.get("/v1/nodes/g1"), lambda n: n["status"] == "NotReady", timeout=10)
            await wait_for(lambda: _async(not alive(pid)), bool, timeout=5)
            await asyncio.sleep(2.0)  # well past the 0.75 s lease: held, not Lost
            held = await api.workload(workload_id)
            assert [p["status"] for p in held["placements"]] == ["Running"], held
            agents["g1"] = spawn_agent(nats_server.url, "g1", tmp_path)
            started = asyncio.get_running_loop().time()
            again = await wait_for(
                lambda: api.workload(workload_id),
                lambda w: [p["status"] for p in w["placements"]] == ["Lost", "Running"],
                timeout=15,
            )
            assert asyncio.get_running_loop().time() - started < 15  # not the 30 s grace
            assert again["placements"][1]["node"] == "g1" and again["placements"][1]["attempt"] == 2
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=10)


async def test_a_frozen_agent_that_comes_back_has_its_replaced_work_stopped(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    agents = [spawn_agent(nats_server.url, name, tmp_path) for name in ("f1", "f2")]
    try:
        async with running_hub(nats_server.url, sqlite_url, federation=no_eviction_grace()) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["status"] == "Ready" for x in n))
            workload_id = await api.post_workload(
                {
                    "name": "long",
                    "command": PIDFILE_CMD,
                    "env": {"PIDS": str(shared_dir)},
                    "resources": {"cpu": 1},
                }
            )
            first = await api.wait_status(workload_id, "Running")
            frozen_name = first["node"]
            pidfile = shared_dir / f"{first['placements'][0]['id']}.pid"
            pid = int((await wait_for(lambda: _read(pidfile), bool)).strip())
            frozen = agents[0] if frozen_name == "f1" else agents[1]
            frozen.send_signal(signal.SIGSTOP)
            await wait_for(
                lambda: api.workload(workload_id),
                lambda w: w["status"] == "Running" and w["node"] != frozen_name,
                timeout=10,
            )
            assert alive(pid), "the old process keeps running while its agent is frozen"
            frozen.send_signal(signal.SIGCONT)
            await wait_for(lambda: api.get(f"/v1/nodes/{frozen_name}"), lambda n: n["status"] == "Ready")
            await wait_for(lambda: _async(not alive(pid)), bool, timeout=10)
            assert (await api.workload(workload_id))["status"] == "Running"
            # The stop of the stale copy is on record (was: stopped without an event or a log line).
            stale = await wait_for(
                lambda: api.get("/v1/events?kind=StaleCopyStopped"), lambda e: e["items"], timeout=10
            )
            event = stale["items"][0]
            assert event["object_id"] == first["placements"][0]["id"], event
            assert frozen_name in event["message"] and event["data"]["workload_id"] == workload_id, event
    finally:
        for agent in agents:
            with contextlib.suppress(ProcessLookupError):
                agent.send_signal(signal.SIGCONT)
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=10)


async def test_nats_restart_mid_run_agent_reconnects_and_the_buffered_report_arrives(sqlite_url, tmp_path):
    port = free_port()
    server = NatsServer(port=port).start()
    try:
        async with (
            running_hub(server.url, sqlite_url, lease_missed_heartbeats=20) as (_, api),
            running_agents(server.url, tmp_path, ["r1"], heartbeat_interval_s=0.5) as agents,
        ):
            workload_id = await api.post_workload({"name": "through-outage", "command": ["sleep", "1.5"]})
            await api.wait_status(workload_id, "Running")
            server.stop()
            await asyncio.sleep(2.5)  # the workload ends while NATS is down
            placement = agents[0].agent.runner.states()[0]
            assert placement.state == "Succeeded"
            assert len(agents[0].agent.outbox) >= 1, "the report waits in the outbox"
            server = NatsServer(port=port).start()
            done = await api.wait_status(workload_id, "Succeeded", timeout=20)
            assert done["exit_code"] == 0
            assert agents[0].agent.counters["reconnects"] >= 1
            await wait_for(lambda: _async(not agents[0].agent.outbox), bool, timeout=10)
            node = await api.get("/v1/nodes/r1")
            assert node["status"] == "Ready"
            again = await api.post_workload({"name": "after-outage", "command": ["true"]})
            assert (await api.wait_status(again, "Succeeded"))["node"] == "r1"
    finally:
        server.stop()


async def test_a_restarted_hub_recovers_from_the_store_and_the_agents_reports(
    nats_server, sqlite_url, tmp_path
):
    async with running_agents(nats_server.url, tmp_path, ["h1"], wait_registered=False) as agents:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1)
            finishing = await api.post_workload({"name": "finishes-while-down", "command": ["sleep", "1"]})
            sleeping = await api.post_workload({"name": "keeps-running", "command": ["sleep", "60"]})
            await api.wait_status(finishing, "Running")
            await api.wait_status(sleeping, "Running")
        runner = agents[0].agent.runner
        await wait_for(lambda: _async(any(p.state == "Succeeded" for p in runner.states())), bool, timeout=10)
        assert agents[0].agent.outbox, "the final report could not be delivered while the hub was down"
        async with running_hub(nats_server.url, sqlite_url) as (running, api):
            done = await api.wait_status(finishing, "Succeeded")
            assert done["exit_code"] == 0
            still = await api.workload(sleeping)
            assert still["status"] == "Running" and len(still["placements"]) == 1
            assert running.hub.allocated("h1")["cpu"] > 0, "the running placement's reservation was rebuilt"
            status, _ = await api.call("DELETE", f"/v1/workloads/{sleeping}")
            assert status == 202
            await api.wait_status(sleeping, "Cancelled")


async def test_commands_sent_together_run_at_once_yet_in_order_per_placement(
    nats_server, sqlite_url, tmp_path
):
    """The agent does not start one command after another: the starts of different placements
    overlap; a repeat sent before the first answer gets that answer marked duplicate (one process);
    a stop sent right behind its run waits for that run and stops the process."""
    async with (
        running_hub(nats_server.url, sqlite_url),
        running_agents(nats_server.url, tmp_path, ["c1"]) as agents,
    ):
        runner = agents[0].agent.runner
        nc = await nats.connect(nats_server.url)
        try:
            subject = Subjects("default").command("c1")

            def run(command_id: str, placement_id: str) -> CommandV1:
                return CommandV1(
                    command_id=command_id,
                    kind="run",
                    placement_id=placement_id,
                    workload_id="w-" + placement_id,
                    spec=RunSpec(command=["sleep", "30"]),
                )

            async def send(command: CommandV1) -> CommandAckV1:
                return decode((await nc.request(subject, encode(command), timeout=10)).data, CommandAckV1)

            starting: set[str] = set()
            overlapped = asyncio.Event()
            real_spawn = runner._spawn

            async def watched_spawn(entry):  # notes how many starts are under way at once
                starting.add(entry.state.placement_id)
                if len(starting) > 1:
                    overlapped.set()
                try:
                    return await real_spawn(entry)
                finally:
                    starting.discard(entry.state.placement_id)

            runner._spawn = watched_spawn
            commands = [run(f"run-{n}", f"p-{n}") for n in range(6)]
            acks = await asyncio.gather(*(send(c) for c in [*commands, commands[0]]))
            assert all(ack.accepted for ack in acks)
            assert sorted(ack.duplicate for ack in acks) == [False] * 6 + [True]
            assert overlapped.is_set()
            assert sorted(s.placement_id for s in runner.states()) == [f"p-{n}" for n in range(6)]

            stopped_after_start: list[bool] = []
            real_stop = runner.stop

            async def watched_stop(placement_id: str) -> bool:  # was the run's start over by then?
                entry = runner.placements.get(placement_id)
                stopped_after_start.append(entry is not None and entry.task is not None)
                return await real_stop(placement_id)

            runner.stop = watched_stop
            stop = CommandV1(command_id="stop-x", kind="stop", placement_id="p-x", workload_id="w-p-x")
            run_ack, stop_ack = await asyncio.gather(send(run("run-x", "p-x")), send(stop))
            assert run_ack.accepted and stop_ack.accepted
            assert stop_ack.reason != "unknown placement"  # it came after the run, not before
            assert stopped_after_start[0]

            async def state_of_x() -> str:
                return runner.placements["p-x"].state.state

            await wait_for(state_of_x, lambda state: state == "Cancelled")
        finally:
            await nc.close()


async def test_duplicate_commands_and_reports_change_nothing(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["d1"]) as agents,
    ):
        nc = await nats.connect(nats_server.url)
        try:
            subjects = Subjects("default")
            command = CommandV1(
                command_id="cmd-1",
                kind="run",
                placement_id="p-dup",
                workload_id="w-dup",
                spec=RunSpec(command=["sleep", "30"]),
            )
            first = decode(
                (await nc.request(subjects.command("d1"), encode(command), timeout=5)).data, CommandAckV1
            )
            second = decode(
                (await nc.request(subjects.command("d1"), encode(command), timeout=5)).data, CommandAckV1
            )
            assert (first.accepted, first.duplicate) == (True, False)
            assert (second.accepted, second.duplicate) == (True, True)
            assert [s.placement_id for s in agents[0].agent.runner.states()] == ["p-dup"]

            stop_unknown = CommandV1(command_id="cmd-2", kind="stop", placement_id="p-never", workload_id="w")
            ack = decode(
                (await nc.request(subjects.command("d1"), encode(stop_unknown), timeout=5)).data, CommandAckV1
            )
            assert ack.reason == "unknown placement"
            late_run = CommandV1(
                command_id="cmd-3",
                kind="run",
                placement_id="p-never",
                workload_id="w",
                spec=RunSpec(command=["true"]),
            )
            ack = decode(
                (await nc.request(subjects.command("d1"), encode(late_run), timeout=5)).data, CommandAckV1
            )
            assert not ack.accepted and "stopped" in ack.reason

            workload_id = await api.post_workload({"name": "reported", "command": ["true"]})
            done = await api.wait_status(workload_id, "Succeeded")
            events_before = (await api.get(f"/v1/events?object_id={workload_id}"))["items"]
            replay = StatusReportV1(
                report_id="replayed",
                node="d1",
                placement=PlacementState(
                    placement_id=done["placements"][0]["id"],
                    workload_id=workload_id,
                    state="Failed",
                    exit_code=9,
                ),
            )
            for _ in range(2):
                await nc.request(subjects.report("d1"), encode(replay), timeout=5)
            after = await api.workload(workload_id)
            assert (after["status"], after["exit_code"]) == ("Succeeded", 0)
            assert (await api.get(f"/v1/events?object_id={workload_id}"))["items"] == events_before
        finally:
            await nc.close()
            await agents[0].agent.runner.stop("p-dup")


async def test_malformed_messages_are_counted_and_dropped_and_everyone_keeps_running(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["m1"]) as agents,
    ):
        nc = await nats.connect(nats_server.url)
        try:
            subjects = Subjects("default")
            reply = await nc.request(subjects.command("m1"), b"{not json", timeout=5)
            assert decode(reply.data, CommandAckV1).accepted is False
            await nc.request(subjects.command("m1"), b'{"v": 1, "command_id": 5}', timeout=5)
            await nc.request(subjects.command("m1"), b'{"v": 99}', timeout=5)
            await nc.publish(subjects.heartbeat("m1"), b"\xff\xfe garbage")
            await nc.publish(subjects.report("m1"), b'{"v": 1, "report_id": "x"}')
            await nc.request(subjects.register("m1"), b"[]", timeout=5)
            await nc.flush()
        finally:
            await nc.close()
        assert agents[0].agent.counters["malformed_messages"] == 3
        health = await wait_for(
            lambda: api.get("/healthz"), lambda h: sum(h["malformed_messages"].values()) == 3
        )
        assert health["malformed_messages"] == {"heartbeat": 1, "report": 1, "register": 1}
        workload_id = await api.post_workload({"name": "still-fine", "command": ["true"]})
        assert (await api.wait_status(workload_id, "Succeeded"))["node"] == "m1"


async def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


async def _async(value: bool) -> bool:
    return value
