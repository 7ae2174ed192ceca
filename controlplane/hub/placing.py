"""The placement round: pending workloads' missing replicas placed by the scheduling framework,
then offered to the candidates' local policies (the bid round), written as Scheduled placements."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

from controlplane.hub.bidding import BidOutcome, run_bid_round
from controlplane.hub.lifecycle import missing_replicas
from controlplane.hub.placement import Placer, ReplicaChoice
from controlplane.hub.registry import NodeRegistry
from controlplane.hub.spec import WorkloadSpec
from controlplane.hub.workloads import PlacementBook
from controlplane.observe.hub import HubMetrics
from controlplane.scheduling.explanation import BidRound
from controlplane.store import queries
from controlplane.store.models import PlacementRow, WorkloadRow
from controlplane.store.store import Store

__all__ = ["PlacementRound"]


class PlacementRound:
    """Runs inside the hub's lock; ``active`` is the hub's map of live placements, shared."""

    def __init__(
        self,
        store: Store,
        placer: Placer,
        registry: NodeRegistry,
        book: PlacementBook,
        active: dict[str, tuple[str, int, str]],
        *,
        bid_deadline_ms: float,
        metrics: HubMetrics,
    ) -> None:
        self.store = store
        self.placer = placer
        self.registry = registry
        self.book = book
        self._active = active
        self.bid_deadline_ms = bid_deadline_ms
        self.metrics = metrics

    async def place_pending(self) -> None:
        """Place the missing replicas of pending workloads (up to 200 a round), one transaction per
        workload: the bid round waits on the network between the read and the write, never
        inside a write transaction (SQLite's one writer lock would stall every other writer:
        invocation records, reports, the API)."""
        async with self.store.session() as s:
            pending = [w.id for w in await queries.pending_workloads(s, limit=200)]
        unplaced = 0  # replicas this round found no node for: they wait for capacity
        for workload_id in pending:
            unplaced += await self._place(workload_id)
        self.metrics.scheduler.set_pending("unschedulable", unplaced)

    async def _place(self, workload_id: str) -> int:
        """Place one workload's missing replicas; how many found no node."""
        async with self.store.session() as s:
            workload = await s.get(WorkloadRow, workload_id)
            if workload is None or workload.status != "Pending" or workload.cancel_requested:
                return 0
            placements = await queries.placements_of(s, workload_id)
            missing = missing_replicas(workload.replicas, placements)
            if not missing:
                await self.book.refresh_workload(s, workload_id)
                return 0
            spec = WorkloadSpec.from_stored(workload.spec)
            # Attempts so far per replica (the hub's lock is held: none is added meanwhile).
            attempts = {p.replica: p.attempt for p in sorted(placements, key=lambda p: p.attempt)}
        outcome = self.placer.place(workload_id, spec, missing)
        unplaced = len(missing) - len(outcome.choices)
        if self.bid_deadline_ms > 0 and outcome.choices:
            # One deadline for all replicas of the workload, not one each: the rounds wait on the
            # network together; each move after its round is synchronous (no interleaving).
            outcome.choices = list(
                await asyncio.gather(*(self._with_bids(workload_id, spec, c) for c in outcome.choices))
            )
        async with self.store.session() as s:
            workload = await s.get(WorkloadRow, workload_id)
            assert workload is not None  # the hub's lock is held: nothing deletes it meanwhile
            now = time.time()
            for choice in outcome.choices:
                attempt = attempts.get(choice.replica, 0) + 1
                placement = PlacementRow(
                    id=uuid.uuid4().hex,
                    workload_id=workload_id,
                    replica=choice.replica,
                    attempt=attempt,
                    node=choice.node,
                    cluster=choice.cluster,
                    status="Scheduled",
                    command_id=uuid.uuid4().hex,
                    assignment=choice.assignment,
                    explanation=choice.explanation.to_dict(),
                    scheduled_at=now,
                    updated_at=now,
                )
                s.add(placement)
                self._active[placement.id] = (workload_id, choice.replica, choice.node)
                Store.add_event(
                    s,
                    "PlacementScheduled",
                    "workload",
                    workload_id,
                    f"replica {choice.replica} -> {choice.node} (attempt {attempt})",
                    {"node": choice.node, "replica": choice.replica},
                )
            if outcome.victims:
                await self.book.preempt(s, outcome.victims, by=workload)
            if outcome.choices:
                await s.flush()
                workload.message = outcome.unschedulable_reason
                await self.book.refresh_workload(s, workload_id)
            elif outcome.unschedulable_reason and workload.message != outcome.unschedulable_reason:
                workload.message = outcome.unschedulable_reason
                workload.updated_at = now
                Store.add_event(s, "FailedScheduling", "workload", workload_id, outcome.unschedulable_reason)
        return unplaced

    def _count_bids(self, result: BidOutcome) -> None:
        asked = [row for row in result.rows if row.asked]
        answered = [row for row in asked if row.bid is not None]
        declined = sum(1 for row in answered if row.bid is not None and not row.bid.accept)
        self.metrics.bids.round(
            result.decided_by, asked=len(asked), answered=len(answered), declined=declined
        )

    async def _with_bids(self, workload_id: str, spec: WorkloadSpec, choice: ReplicaChoice) -> ReplicaChoice:
        """Let the candidates' local policies bid; move the replica if another node wins."""
        result = await run_bid_round(
            self.registry, workload_id, spec, choice, deadline_ms=self.bid_deadline_ms
        )
        if result is None:
            return choice
        self._count_bids(result)
        decided_by = result.decided_by
        if result.winner != choice.node:
            self.placer.release(workload_id, choice.replica)
            pinned = dataclasses.replace(
                spec, affinity=dataclasses.replace(spec.affinity, nodes=[result.winner])
            )
            moved = self.placer.place(workload_id, pinned, [choice.replica])
            if moved.choices:
                choice = moved.choices[0]
            else:  # the winner no longer fits (raced): keep the scheduler's choice
                again = self.placer.place(workload_id, spec, [choice.replica])
                if not again.choices:
                    raise RuntimeError("replica could not be placed again after a bid round")
                choice = again.choices[0]
                decided_by = "scheduler (winner no longer fits)"
        bids = BidRound(decided_by, result.winner, tuple(result.rows))
        choice.explanation = dataclasses.replace(choice.explanation, bids=bids)
        return choice
