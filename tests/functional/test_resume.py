"""A killed agent process, restarted while the hub is down, resumes its restartable work alone;
the hub, back later, keeps the same placement and learns the restart count."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from harness import no_eviction_grace, running_hub, spawn_agent, wait_for

from edge_agent.exit_records import ExitRecords

# Counts its runs in $RUNS (a directory the test can read: the agent runs it as another user).
COUNTING = ["sh", "-c", 'echo run >> "$RUNS/$EDGEPLANE_PLACEMENT_ID.runs"; exec sleep 60']


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def _counted(path: Path, n: int) -> bool:
    return _runs(path) >= n


async def test_a_restarted_agent_resumes_its_work_without_a_hub_and_the_hub_keeps_it(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    agent = spawn_agent(nats_server.url, "r1", tmp_path, cpu="2")
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            workload_id = await api.post_workload(
                {
                    "name": "keep-going",
                    "command": COUNTING,
                    "env": {"RUNS": str(shared_dir)},
                    "restart_policy": "on-failure",
                }
            )
            running = await api.wait_status(workload_id, "Running")
            placement_id = running["placements"][0]["id"]
        runs = shared_dir / f"{placement_id}.runs"
        await wait_for(lambda: _counted(runs, 1), bool)
        # The hub is gone. Now the agent dies too (its process dies with it) and comes back.
        agent.kill()
        agent.wait(timeout=5)
        agent = spawn_agent(nats_server.url, "r1", tmp_path, cpu="2")
        await wait_for(lambda: _counted(runs, 2), bool, timeout=20)  # resumed with no hub at all
        await asyncio.sleep(0.5)
        assert _runs(runs) == 2 and agent.poll() is None
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            workload = await wait_for(
                lambda: api.workload(workload_id),
                lambda w: w["placements"][0].get("restarts") == 1,
                timeout=15,
            )
            assert workload["status"] == "Running"
            assert [p["id"] for p in workload["placements"]] == [placement_id]  # not Lost, not moved
            assert workload["placements"][0]["status"] == "Running"
            events = await api.get("/v1/events?kind=PlacementRestarted")
            assert any(placement_id in str(e) for e in events["items"])
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)


async def test_a_restarted_agent_does_not_resume_work_the_hub_has_moved(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    """Issue 11, finding 3: a restarted agent resumed on-failure work that the hub had already
    placed elsewhere, and it ran in two places at once until the hub stopped one copy."""
    agents = {name: spawn_agent(nats_server.url, name, tmp_path, cpu="2") for name in ("m1", "m2")}
    try:
        async with running_hub(nats_server.url, sqlite_url, federation=no_eviction_grace()) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["status"] == "Ready" for x in n))
            body = {"name": "moved", "command": COUNTING, "env": {"RUNS": str(shared_dir)},
                    "restart_policy": "on-failure", "affinity": {"nodes": ["m1"]}}  # fmt: skip
            workload_id = await api.post_workload(body)
            first = (await api.wait_status(workload_id, "Running"))["placements"][0]["id"]
            await wait_for(lambda: _counted(shared_dir / f"{first}.runs", 1), bool)
            # m1 dies; the hub gives up on it: the placement is Lost, the replica to be placed again.
            agents["m1"].kill()
            agents["m1"].wait(timeout=5)
            await wait_for(lambda: api.get("/v1/nodes/m1"), lambda n: n["status"] == "NotReady")
            moved = await wait_for(
                lambda: api.workload(workload_id), lambda w: w["placements"][0]["status"] == "Lost"
            )
            assert moved["placements"][0]["id"] == first
            # m1 comes back while the hub is up: the hub's answer says the old placement is not its
            # any more (the replica's new attempt goes to m1 again, by affinity: one run, not two).
            agents["m1"] = spawn_agent(nats_server.url, "m1", tmp_path, cpu="2")
            await wait_for(lambda: api.get("/v1/nodes/m1"), lambda n: n["status"] == "Ready", timeout=20)
            again = await wait_for(lambda: api.workload(workload_id), lambda w: len(w["placements"]) == 2)
            second = again["placements"][1]["id"]
            await wait_for(lambda: _counted(shared_dir / f"{second}.runs", 1), bool, timeout=20)
            await asyncio.sleep(1.5)
            assert _runs(shared_dir / f"{first}.runs") == 1, "the moved placement was not resumed"
            assert _runs(shared_dir / f"{second}.runs") == 1
            assert (
                not (tmp_path / "m1" / "placements.json").exists()
                or first not in (tmp_path / "m1" / "placements.json").read_text()
            )
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=10)


async def test_without_the_hub_an_agent_resumes_only_within_the_autonomy_window(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    agent = spawn_agent(nats_server.url, "w1", tmp_path, cpu="2")
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            body = {"name": "stale", "command": COUNTING, "env": {"RUNS": str(shared_dir)},
                    "restart_policy": "on-failure"}  # fmt: skip
            placement_id = (await api.wait_status(await api.post_workload(body), "Running"))["placements"][0][
                "id"
            ]
        runs = shared_dir / f"{placement_id}.runs"
        await wait_for(lambda: _counted(runs, 1), bool)
        agent.kill()
        agent.wait(timeout=5)
        # The hub was last heard an hour ago (beyond the default window of 300 s) and is gone now.
        (tmp_path / "w1" / "hub_contact").write_text(f"{time.time() - 3600:.3f}\n")
        agent = spawn_agent(nats_server.url, "w1", tmp_path, cpu="2")
        await asyncio.sleep(8)  # resume_confirm_s (5 s) and then some
        assert _runs(runs) == 1 and agent.poll() is None
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)


async def test_work_that_ended_while_its_agent_was_frozen_and_killed_is_not_run_again(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    """The chaos run's "completed twice": a unit exited, and its agent died before the exit reached
    its outbox. The agent is frozen (SIGSTOP) while its unit ends, so only the unit spawner sees the
    exit, then killed; restarted, it reports the recorded end and the hub does not run it again."""
    body = {
        "name": "once",
        "command": ["sh", "-c", 'echo run >> "$RUNS/$EDGEPLANE_PLACEMENT_ID.runs"; sleep 1; exit 0'],
        "env": {"RUNS": str(shared_dir)},
        "restart_policy": "never",
    }
    agent = spawn_agent(nats_server.url, "x1", tmp_path, cpu="2")
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            workload_id = await api.post_workload(body)
            placement_id = (await api.wait_status(workload_id, "Running"))["placements"][0]["id"]
            runs = shared_dir / f"{placement_id}.runs"
            await wait_for(lambda: _counted(runs, 1), bool)
            agent.send_signal(signal.SIGSTOP)
            record = ExitRecords.for_work_dir(tmp_path / "x1").path_for(placement_id)
            await wait_for(lambda: _exists(record), bool, timeout=10)  # the unit ended, unheard
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=5)
            agent = spawn_agent(nats_server.url, "x1", tmp_path, cpu="2")
            done = await api.wait_status(workload_id, "Succeeded", timeout=20)
            assert [p["id"] for p in done["placements"]] == [placement_id]
            assert done["placements"][0]["status"] == "Succeeded"
            await asyncio.sleep(1.5)  # a second run would have started by now
            assert _runs(runs) == 1
            assert not record.exists(), "the record goes once its final state is in the outbox"
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)


async def _exists(path: Path) -> bool:
    return path.exists()
