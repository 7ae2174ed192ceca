"""A placement round's cost follows what changed (issue 21): pending workloads no node fits are
not handed to the scheduler again in every round, only once capacity changes; of fresh workloads
with the same terms only the first is tried once one found no node; what does fit is placed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from sqlalchemy import select

from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.hub.placement import PlacementNode, PlacementOutcome
from controlplane.hub.placing import PlacementRound
from controlplane.hub.registry import NodeRegistry
from controlplane.hub.workloads import PlacementBook
from controlplane.observe.hub import HubMetrics
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.db import sqlite_url
from controlplane.store.models import PlacementRow, WorkloadRow
from controlplane.store.store import Store


class CountingPlacer(FrameworkPlacer):
    def __init__(self) -> None:
        super().__init__()
        self.placed = 0

    def place(self, workload_id: str, spec: WorkloadSpec, replicas: list[int]) -> PlacementOutcome:
        self.placed += 1
        return super().place(workload_id, spec, replicas)


async def _add(store: Store, n: int) -> None:
    now = time.time()
    async with store.session() as s:
        for i in range(n):
            spec = WorkloadSpec.parse({"name": f"w{i}", "command": ["true"], "resources": {"cpu": 1}})
            s.add(
                WorkloadRow(
                    id=f"w{i:03d}", name=spec.name, status="Pending", spec=spec.to_dict(),
                    replicas=1, priority=0, created_at=now + i, updated_at=now + i,
                )
            )  # fmt: skip


async def test_unplaceable_workloads_are_tried_again_only_when_capacity_changes(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "s.sqlite3"))
    try:
        placer = CountingPlacer()
        placer.upsert_node(PlacementNode(name="n1", cluster="default", region="r", cpu=2, memory=2**30))
        active: dict[str, tuple[str, int, str]] = {}
        book = PlacementBook(placer, active, wake=lambda: None)
        registry = cast(NodeRegistry, cast(Any, None))  # no bid rounds (deadline 0)
        metrics = HubMetrics()
        placing = PlacementRound(store, placer, registry, book, active, bid_deadline_ms=0, metrics=metrics)
        await _add(store, 30)

        await placing.place_pending()
        assert len(active) == 2  # two 1-cpu replicas fit the 2-cpu node
        first = placer.placed
        assert first == 3  # two placed, then one that found no node stands for the 28 alike

        for _ in range(5):
            await placing.place_pending()
        assert placer.placed == first  # nothing changed: nothing handed to the scheduler again

        async with store.session() as s:
            done = await s.scalar(select(PlacementRow).limit(1))
            assert done is not None
            await book.end(s, done, "Succeeded", "")  # releases one cpu
        await placing.place_pending()
        assert len(active) == 2  # the freed cpu taken by the next pending workload
        assert placer.placed == first + 2  # placed one, then one failed for the rest

        async with store.session() as s:
            waiting = list(await s.scalars(select(WorkloadRow).where(WorkloadRow.status == "Pending")))
        assert len(waiting) == 27
        assert all(w.message for w in waiting)  # each says why it waits
    finally:
        await store.close()
