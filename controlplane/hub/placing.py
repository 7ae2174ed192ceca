"""The placement round: pending workloads' missing replicas placed by the scheduling framework,
then offered to the candidates' local policies (the bid round), written as Scheduled placements."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import defer

from controlplane.hub.bidding import BidOutcome, BidSilence, run_bid_round
from controlplane.hub.lifecycle import missing_replicas
from controlplane.hub.placement import PlacementOutcome, Placer, ReplicaChoice
from controlplane.hub.registry import NodeRegistry
from controlplane.hub.spec_cache import SpecCache
from controlplane.hub.workloads import PlacementBook
from controlplane.observe.hub import HubMetrics
from controlplane.scheduling.explanation import BidRound
from controlplane.scheduling.model import PLACEMENT_TERMS
from controlplane.specs.workload import WorkloadSpec
from controlplane.store import queries
from controlplane.store.models import PlacementRow, WorkloadRow
from controlplane.store.store import Store

__all__ = ["RETRY_ALL_S", "PlacementRound"]

log = logging.getLogger("edgeplane.hub")

# How often every pending workload is handed to the scheduler again even though the placer's
# capacity did not change (a safety net: the scheduler may weigh what its generation misses).
RETRY_ALL_S = 2.0


@dataclass(slots=True)
class _Plan:
    """What a round does for one pending workload."""

    workload_id: str
    spec: WorkloadSpec
    outcome: PlacementOutcome
    attempts: dict[int, int] = field(default_factory=dict)  # replica -> its latest attempt
    refresh: bool = False  # nothing to place: only its status is worked out again
    write: bool = False  # something to write (placements, victims, a status or a new message)
    placed: list[str] = field(default_factory=list)  # ids of the placements written


def _shape(spec: WorkloadSpec, missing: list[int]) -> tuple[object, ...]:
    """What the scheduler's answer for a fresh workload depends on, besides its id and name (the
    placement terms, its kind and run time, the replicas asked for)."""
    terms = tuple(repr(getattr(spec, term)) for term in PLACEMENT_TERMS)
    return (*terms, spec.kind, spec.timeout_s, spec.expected_runtime_s, tuple(missing))


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
        specs: SpecCache | None = None,
        bid_shield_margin: float | None = None,
    ) -> None:
        self.store = store
        self.placer = placer
        self.registry = registry
        self.book = book
        self._active = active
        self.bid_deadline_ms = bid_deadline_ms
        self.bid_silence = BidSilence()  # nodes whose bids no round waits for (on probation)
        self.bid_shield_margin = bid_shield_margin  # the bids' SLA shield (bidding.decide)
        self.metrics = metrics
        self.specs = specs if specs is not None else SpecCache()  # an empty cache is falsy
        # Workloads no node fitted: id -> (the placer's generation then, their replicas).
        self._unplaceable: dict[str, tuple[int | None, int]] = {}
        self._retried_all_at = float("-inf")
        # Told of each workload whose first placement the round wrote: (its id, seconds since its
        # creation); e.g. a scheduling profile canary's placement-delay signal.
        self.placed_listeners: list[Callable[[str, float], None]] = []

    async def place_pending(self) -> list[tuple[PlacementRow, WorkloadSpec]]:
        """Place the missing replicas of pending workloads (up to 200 a round) in three steps: one
        read of the pending workloads and their placements, the scheduler and the bid rounds in
        memory (all bid rounds of the round at once), one write transaction for every placement
        made. The bid rounds wait on the network between the read and the write, never inside a
        write transaction (SQLite's one writer lock would stall every other writer: invocation
        records, reports, the API).

        A round's cost follows what changed: a workload no node fitted is not tried again until
        the placer's capacity changed (a release, a node's state) or ``RETRY_ALL_S`` passed, and
        of new workloads with the same placement terms only the first is handed to the scheduler
        once one of them found no node in this round.

        Returns the placements written (committed), with their workloads' specs: their run
        commands can go out at once."""
        generation = getattr(self.placer, "generation", None)
        now = time.monotonic()
        retry_all = generation is None or now - self._retried_all_at >= RETRY_ALL_S
        if retry_all:
            self._retried_all_at = now
            self._unplaceable.clear()
        async with self.store.session() as s:
            heads = await queries.pending_heads(s, limit=200)
            skipped = [h for h in heads if self._unplaceable.get(h.id) == (generation, h.replicas)]
            tried = [h for h in heads if self._unplaceable.get(h.id) != (generation, h.replicas)]
            ids = [h.id for h in tried]
            placements = await queries.placements_of_many(s, ids)
            specs = await self.specs.load(s, ids)
        unplaced = sum(h.replicas for h in skipped)  # an upper bound: they wait for capacity
        plans: list[_Plan] = []
        failed_shapes: dict[tuple[object, ...], str] = {}
        profile_of = getattr(self.placer, "profile_of", None)
        for head in tried:
            spec = specs.get(head.id)
            if spec is None:
                continue
            have = placements[head.id]
            missing = missing_replicas(head.replicas, have)
            if not missing:
                plans.append(_Plan(head.id, spec, PlacementOutcome(), refresh=True, write=True))
                continue
            shape = _shape(spec, missing) if not have else None
            if shape is not None and profile_of is not None:
                shape = (*shape, profile_of(head.id, spec.kind))  # a profile canary places some with another
            if shape is not None and shape in failed_shapes:
                # The same terms found no node a moment ago in this round: nor would these.
                outcome = PlacementOutcome(unschedulable_reason=failed_shapes[shape])
            else:
                outcome = self.placer.place(head.id, spec, missing)
            if not outcome.choices and not outcome.victims:
                self._unplaceable[head.id] = (generation, head.replicas)
                if shape is not None:
                    failed_shapes[shape] = outcome.unschedulable_reason
            unplaced += len(missing) - len(outcome.choices)
            # Attempts so far per replica (the hub's lock is held: none is added meanwhile).
            attempts = {p.replica: p.attempt for p in sorted(have, key=lambda p: p.attempt)}
            reason = outcome.unschedulable_reason
            write = bool(outcome.choices or outcome.victims or (reason and reason != head.message))
            plans.append(_Plan(head.id, spec, outcome, attempts, write=write))
        if self.bid_deadline_ms > 0:
            await self._bid(plans)
        plans = [plan for plan in plans if plan.write]
        written: list[tuple[PlacementRow, WorkloadSpec]] = []
        firsts: dict[str, float] = {}
        if plans:
            try:
                written = await self._write(plans, firsts)
            except BaseException:
                # Nothing was written: give back what the placer reserved (placed again later).
                for plan in plans:
                    for choice in plan.outcome.choices:
                        self.placer.release(plan.workload_id, choice.replica)
                    for placement_id in plan.placed:
                        self._active.pop(placement_id, None)
                raise
        self.metrics.scheduler.set_pending("unschedulable", unplaced)
        for listener in self.placed_listeners:
            for workload_id, delay_s in firsts.items():
                listener(workload_id, delay_s)
        return written

    async def _bid(self, plans: list[_Plan]) -> None:
        """Every replica placed this round offered to its candidates' local policies at once: one
        deadline for the whole round; each move after its bid round is synchronous (no
        interleaving). A workload whose bid rounds failed gives its replicas back (placed again
        in a later round)."""
        bidding = [plan for plan in plans if plan.outcome.choices]
        if not bidding:
            return
        results = await asyncio.gather(
            *(
                asyncio.gather(
                    *(self._with_bids(plan.workload_id, plan.spec, c) for c in plan.outcome.choices)
                )
                for plan in bidding
            ),
            return_exceptions=True,
        )
        for plan, result in zip(bidding, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "bid round of workload %s failed: %s; placed again later", plan.workload_id, result
                )
                for choice in plan.outcome.choices:
                    self.placer.release(plan.workload_id, choice.replica)
                plan.outcome.choices = []
                plan.outcome.unschedulable_reason = ""
            else:
                plan.outcome.choices = list(result)

    async def _write(
        self, plans: list[_Plan], firsts: dict[str, float]
    ) -> list[tuple[PlacementRow, WorkloadSpec]]:
        """One transaction for the round: the placements made, their events, the workloads'
        new status and messages. Returns the placements made, with their specs; ``firsts`` gets
        the workloads placed for the first time, with the seconds since their creation."""
        ids = [plan.workload_id for plan in plans]
        written: list[tuple[PlacementRow, WorkloadSpec]] = []
        async with self.store.session() as s:
            workloads = {
                w.id: w
                for w in await s.scalars(
                    select(WorkloadRow)
                    .where(WorkloadRow.id.in_(ids))
                    .options(defer(WorkloadRow.spec, raiseload=True))  # parsed once: self.specs
                )
            }
            existing = await queries.placements_of_many(s, ids)
            now = time.time()
            for plan in plans:
                workload = workloads.get(plan.workload_id)
                if workload is None:  # the hub's lock is held: nothing deletes it meanwhile
                    continue
                outcome = plan.outcome
                placements = existing[plan.workload_id]
                if outcome.choices and not placements:
                    firsts[plan.workload_id] = max(0.0, now - workload.created_at)
                for choice in outcome.choices:
                    attempt = plan.attempts.get(choice.replica, 0) + 1
                    placement = PlacementRow(
                        id=uuid.uuid4().hex,
                        workload_id=plan.workload_id,
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
                        acked=False,
                        stop_acked=False,
                        restarts=0,
                        message="",
                    )
                    s.add(placement)
                    written.append((placement, plan.spec))
                    placements.append(placement)
                    self._active[placement.id] = (plan.workload_id, choice.replica, choice.node)
                    plan.placed.append(placement.id)
                    Store.add_event(
                        s,
                        "PlacementScheduled",
                        "workload",
                        plan.workload_id,
                        f"replica {choice.replica} -> {choice.node} (attempt {attempt})",
                        {"node": choice.node, "replica": choice.replica},
                    )
                if outcome.victims:
                    await self.book.preempt(s, outcome.victims, by=workload)
                if outcome.choices or plan.refresh:
                    if outcome.choices:
                        workload.message = outcome.unschedulable_reason
                    placements.sort(key=lambda p: (p.replica, p.attempt))
                    self.book.apply_verdict(s, workload, placements)
                elif outcome.unschedulable_reason and workload.message != outcome.unschedulable_reason:
                    workload.message = outcome.unschedulable_reason
                    workload.updated_at = now
                    Store.add_event(
                        s, "FailedScheduling", "workload", plan.workload_id, outcome.unschedulable_reason
                    )
        return written

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
            self.registry,
            workload_id,
            spec,
            choice,
            deadline_ms=self.bid_deadline_ms,
            silence=self.bid_silence,
            shield_margin=self.bid_shield_margin,
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
