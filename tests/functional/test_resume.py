"""A killed agent process, restarted while the hub is down, resumes its restartable work alone;
the hub, back later, keeps the same placement and learns the restart count."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness import running_hub, spawn_agent, wait_for

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
