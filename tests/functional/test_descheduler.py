"""The descheduler live: a real hub and agents; a node's battery collapses under restartable work;
the hub cordons it and moves that work to another node, no faster than its disruption budget,
and leaves what may not move."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness import running_agents, running_hub, wait_for, write_power_supply

from controlplane.hub.descheduler import DeschedulerSettings

FAST = DeschedulerSettings(every_s=0.2, sustain_s=0.6, max_moves=2, window_s=120)
MOVABLE = {"command": ["sleep", "60"], "resources": {"cpu": 0.5}, "restart_policy": "on-failure"}


async def _node_of(api: Any, workload_id: str) -> str:
    return str((await api.workload(workload_id))["node"])


async def test_work_leaves_a_collapsing_battery_within_the_disruption_budget(
    nats_server: Any, sqlite_url: str, tmp_path: Path
) -> None:
    async with (
        running_hub(nats_server.url, sqlite_url, descheduler=FAST) as (running, api),
        running_agents(nats_server.url, tmp_path, ["e1"]) as (e1,),
    ):
        movable = [await api.post_workload({**MOVABLE, "name": f"m{i}"}) for i in range(4)]
        pinned = await api.post_workload(
            {"name": "stay", "command": ["sleep", "60"], "resources": {"cpu": 0.5}}
        )
        for workload in [*movable, pinned]:
            assert (await api.wait_status(workload, "Running"))["node"] == "e1"
        async with running_agents(nats_server.url, tmp_path, ["e2"]):
            await wait_for(
                api.nodes, lambda nodes: len(nodes) == 2 and all(n["status"] == "Ready" for n in nodes)
            )
            write_power_supply(e1.power_dir, on_battery=True, percent=5)

            async def moved() -> list[str]:
                events = (await api.get("/v1/events?kind=Descheduled"))["items"]
                return [e["object_id"] for e in events]

            first = await wait_for(moved, lambda ids: len(ids) >= 2, timeout=20)
            await asyncio.sleep(3)  # fifteen more passes: the budget (2 per 120 s) holds the rest
            assert sorted(await moved()) == sorted(first) and len(first) == 2
            assert set(first) <= set(movable)
            for workload in first:  # placed again, on the other node
                await wait_for(lambda w=workload: _node_of(api, w), lambda node: node == "e2", timeout=20)
            assert await _node_of(api, pinned) == "e1"  # restart_policy never: it stays
            still = [w for w in movable if w not in first]
            assert [await _node_of(api, w) for w in still] == ["e1", "e1"]

            # Cordoned: new work goes elsewhere while the battery is low.
            fresh = await api.post_workload({**MOVABLE, "name": "fresh"})
            assert (await api.wait_status(fresh, "Running"))["node"] == "e2"
            metrics = await (await api.session.get(running.url + "/metrics")).text()
            assert 'edgeplane_node_cordoned{cluster="default",node="e1"} 1.0' in metrics
            assert "edgeplane_descheduler_moves_total 2.0" in metrics

            # Back on mains: the cordon is lifted.
            write_power_supply(e1.power_dir, on_battery=False, percent=40)

            async def cordon_line() -> str:
                text = await (await api.session.get(running.url + "/metrics")).text()
                return next(
                    line
                    for line in text.splitlines()
                    if line.startswith('edgeplane_node_cordoned{cluster="default",node="e1"}')
                )

            await wait_for(cordon_line, lambda line: line.endswith(" 0.0"), timeout=10)
