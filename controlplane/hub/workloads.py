"""The placement book: the lifecycle rules (``hub.lifecycle``) applied to the store's rows.

Reports, lease expiries, preemptions and answers to commands end up here as row changes, events and
stop requests; a workload's status follows from its placements after each change. Every method runs
inside the hub's lock and the caller's transaction.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from edgeplane_contract.messages import NODE_SHUTDOWN, CommandAckV1, PlacementState

from controlplane.hub.dispatch import AckEffect, Sent
from controlplane.hub.learning import InterferenceLearning
from controlplane.hub.lifecycle import (
    ReportEffect,
    carried_restarts,
    late_success_blocked_by,
    report_effect,
    rerun_after_shutdown,
    workload_verdict,
)
from controlplane.hub.placement import Placer
from controlplane.hub.spec_cache import SpecCache
from controlplane.store import queries
from controlplane.store.models import PlacementRow, WorkloadRow
from controlplane.store.store import ACTIVE_PLACEMENT, TERMINAL_PLACEMENT, Store

__all__ = ["PlacementBook"]

log = logging.getLogger("edgeplane.hub")


class PlacementBook:
    """Writes placement and workload state; ``active`` (placement id -> workload, replica, node)
    is the hub's map of live placements, shared; ``wake`` asks the reconcile loop for a round."""

    def __init__(
        self,
        placer: Placer,
        active: dict[str, tuple[str, int, str]],
        *,
        wake: Callable[[], None],
        learning: InterferenceLearning | None = None,
        specs: SpecCache | None = None,
        on_end: Callable[[PlacementRow], dict[str, Any] | None] | None = None,
    ) -> None:
        self.placer = placer
        # Parsed workload specs: the restart policy of a placement its node's shutdown ended.
        self.specs = specs if specs is not None else SpecCache()  # an empty cache is falsy
        self._active = active
        self._wake = wake
        # Told of every placement that ends (the canary's outcome samples); what it returns goes
        # into the end's event (the placement's energy).
        self._on_end = on_end
        # Where a success's runtime observation goes (None: nowhere).
        self.learning = learning
        # Workloads whose status is worked out at the end of a ``refreshing_once`` block (None:
        # outside one, at once).
        self._deferred: set[str] | None = None
        self._learned: list[tuple[PlacementRow, PlacementState]] = []  # successes to record then

    async def apply_report(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """Move a placement forward by an agent's report (``lifecycle.report_effect``)."""
        effect = report_effect(placement.status, state.state)
        if effect is ReportEffect.LATE_SUCCESS:
            await self._late_success(s, placement, state)
            return
        if effect is ReportEffect.IGNORE:
            return
        now = time.time()
        carried = await self._carried(s, placement, state)
        if effect in (ReportEffect.START, ReportEffect.RESTARTS):
            if effect is ReportEffect.START:
                placement.status = "Running"
                placement.acked = True
                placement.started_at = state.started_at or now
                placement.updated_at = now
                Store.add_event(
                    s, "PlacementRunning", "workload", placement.workload_id, f"on {placement.node}"
                )
                await self.refresh_workload(s, placement.workload_id)
            # A Running report after the agent restarted the process locally is normal: it only
            # moves the restart count (and the message) forward; the placement stays Running.
            self._note_restarts(s, placement, state, now, carried)
        else:  # ReportEffect.END
            self._note_restarts(s, placement, state, now, carried)
            placement.exit_code = state.exit_code
            placement.started_at = placement.started_at or state.started_at
            if state.state == "Failed" and state.reason == NODE_SHUTDOWN:
                await self._end_by_shutdown(s, placement, state)
            else:
                await self.end(s, placement, state.state, state.message, finished_at=state.finished_at)
            if state.state == "Succeeded":
                await self._learn(s, placement, state)

    async def _learn(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """Only here, where a placement becomes Succeeded: a replay finds it ended (IGNORE).
        Inside :meth:`refreshing_once` it is recorded when the block ends: each record reads the
        store, and a read flushes what is pending, so one flush serves the whole batch."""
        if self.learning is None:
            return
        if self._deferred is not None:
            self._learned.append((placement, state))
            return
        await self.learning.record(s, placement, state.observation)

    async def _late_success(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """A replica reported Succeeded after its placement was marked Lost (its node was silent,
        not dead). It wins unless a later attempt of the replica may have started: then the replica
        is done, and the re-placement is cancelled before it runs."""
        others = await queries.other_attempts(s, placement)
        started = late_success_blocked_by(placement, others)
        if started:
            log.info(
                "late success of %s on %s ignored: replica %d already ran again on %s",
                placement.id,
                placement.node,
                placement.replica,
                started[0].node,
            )
            return
        now = time.time()
        placement.status = "Succeeded"
        placement.exit_code = state.exit_code
        placement.started_at = placement.started_at or state.started_at
        placement.finished_at = state.finished_at or now
        placement.message = "finished while its node was unreachable"
        placement.updated_at = now
        replacements = [p for p in others if p.status in ACTIVE_PLACEMENT]
        self.request_stops(replacements, "the replica finished on its earlier node")
        Store.add_event(
            s,
            "PlacementSucceeded",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: finished while its node was unreachable"
            + (f"; re-placement on {replacements[0].node} cancelled" if replacements else ""),
            {"placement_id": placement.id, "exit_code": placement.exit_code, "late": True},
        )
        log.info(
            "late success of %s on %s wins: replica %d is done%s",
            placement.id,
            placement.node,
            placement.replica,
            f", re-placement {replacements[0].id} on {replacements[0].node} cancelled"
            if replacements
            else "",
        )
        await self._learn(s, placement, state)
        await self.refresh_workload(s, placement.workload_id)

    async def _carried(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> int:
        """Restarts this attempt inherits from its replica's previous one (``carried_restarts``),
        read only where they can change the count: a later attempt's first report, or a restart."""
        if placement.attempt <= 1 or (placement.status != "Scheduled" and state.restarts == 0):
            return 0
        previous = [
            p for p in await queries.other_attempts(s, placement) if p.attempt == placement.attempt - 1
        ]
        return carried_restarts(previous[0] if previous else None)

    def _note_restarts(
        self, s: AsyncSession, placement: PlacementRow, state: PlacementState, now: float, carried: int = 0
    ) -> None:
        """Record the replica's restarts: those it ``carried`` from an attempt its node's shutdown
        ended, plus the agent's local ones; counts only grow (replays and reordering are no-ops)."""
        restarts = carried + state.restarts
        if restarts <= (placement.restarts or 0):
            return
        placement.restarts = restarts
        placement.updated_at = now
        if state.state == "Running":
            placement.message = state.message
        detail = state.message if state.state == "Running" else ""
        if not detail and state.restarts == 0:
            detail = "placed again after its node shut down"
        Store.add_event(
            s,
            "PlacementRestarted",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: restart {restarts}"
            + (f" ({detail})" if detail else ""),
            {"placement_id": placement.id, "restarts": restarts},
        )

    async def _end_by_shutdown(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """End a placement its agent stopped while shutting down. A stop the hub had asked for ends
        Cancelled, as ever; else the workload's restart policy decides (``lifecycle``): Lost, to run
        again as a restart, or Failed. The node gets no new work until it registers again."""
        self.placer.set_node_ready(placement.node, False)
        if placement.stop_command_id is not None:
            await self.end(s, placement, "Cancelled", "stopped on request", finished_at=state.finished_at)
            return
        spec = (await self.specs.load(s, [placement.workload_id])).get(placement.workload_id)
        policy, limit = (spec.restart_policy, spec.max_restarts) if spec is not None else ("never", 0)
        restarts = placement.restarts or 0
        why = f"node {placement.node} shut down while it ran (agent stopped)"
        if rerun_after_shutdown(policy, restarts, limit):
            placement.exit_code = state.exit_code if state.exit_code is not None else 128 + 15  # SIGTERM
            message = f"{why}; placed again (restart {restarts + 1})"
            await self.end(s, placement, "Lost", message, finished_at=state.finished_at)
            return
        if policy != "never":
            why += f"; max_restarts ({limit}) reached"
        await self.end(s, placement, "Failed", why, finished_at=state.finished_at)

    async def end(
        self,
        s: AsyncSession,
        placement: PlacementRow,
        status: str,
        message: str,
        *,
        finished_at: float | None = None,
    ) -> None:
        now = time.time()
        placement.status = status
        placement.message = message
        placement.finished_at = finished_at or now
        placement.updated_at = now
        self.placer.release(placement.workload_id, placement.replica)
        self._active.pop(placement.id, None)
        extra: dict[str, Any] | None = None
        if self._on_end is not None:
            try:
                extra = self._on_end(placement)
            except Exception:  # a listener must not cost the transaction
                log.exception("placement end listener failed")
        Store.add_event(
            s,
            f"Placement{status}",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: {message or status}"
            + (f" (exit code {placement.exit_code})" if placement.exit_code is not None else ""),
            {"placement_id": placement.id, "exit_code": placement.exit_code, **(extra or {})},
        )
        await self.refresh_workload(s, placement.workload_id)

    async def refresh_workload(self, s: AsyncSession, workload_id: str) -> None:
        """Work out the workload's status again from its placements; inside :meth:`refreshing_once`
        it is only noted, and done once per workload when the block ends."""
        if self._deferred is not None:
            self._deferred.add(workload_id)
            return
        workload = await s.get(WorkloadRow, workload_id)
        if workload is None:
            return
        placements = await queries.placements_of(s, workload_id, ordered=True)
        self.apply_verdict(s, workload, placements)

    @contextlib.asynccontextmanager
    async def refreshing_once(self, s: AsyncSession) -> AsyncIterator[None]:
        """Changes to many placements in ``s`` (a batch of reports), with each touched workload's
        status worked out once at the end, from two queries for all of them, rather than after
        each change (nothing inside reads a workload's status: the verdict depends only on the
        placements, so the end state is the same)."""
        if self._deferred is not None:  # already inside one: the outer block refreshes
            yield
            return
        self._deferred, self._learned = set(), []
        try:
            yield
            ids, learned = list(self._deferred), self._learned
        finally:
            self._deferred, self._learned = None, []
        if self.learning is not None and learned:
            await self.learning.record_many(s, [(p, state.observation) for p, state in learned])
        if not ids:
            return
        workloads = await s.scalars(
            select(WorkloadRow)
            .where(WorkloadRow.id.in_(ids))
            .options(defer(WorkloadRow.spec, raiseload=True))  # the verdict reads no spec
        )
        placements = await queries.placements_of_many(s, ids)
        for workload in workloads:
            self.apply_verdict(s, workload, placements[workload.id])

    def apply_verdict(self, s: AsyncSession, workload: WorkloadRow, placements: list[PlacementRow]) -> None:
        """Set ``workload``'s status from ``placements`` (all of its placements, in ``s``, by
        replica then attempt): what :meth:`refresh_workload` does once it has read them."""
        verdict = workload_verdict(workload.replicas, workload.cancel_requested, placements)
        if verdict.stop_active is not None:
            self.request_stops([p for p in placements if p.status in ACTIVE_PLACEMENT], verdict.stop_active)
        if verdict.message is not None:
            workload.message = verdict.message
        status = verdict.status
        if status != workload.status:
            now = time.time()
            Store.add_event(
                s,
                f"Workload{status}",
                "workload",
                workload.id,
                workload.message if status == "Failed" else "",
            )
            workload.status = status
            workload.updated_at = now
            if status in ("Succeeded", "Failed", "Cancelled"):
                workload.finished_at = now
                if status == "Succeeded":
                    workload.message = ""

    def request_stops(self, placements: list[PlacementRow], reason: str) -> None:
        for placement in placements:
            if placement.stop_command_id is None:
                placement.stop_command_id = uuid.uuid4().hex
                placement.message = reason
                placement.updated_at = time.time()
        self._wake()

    async def lose_node(self, s: AsyncSession, node: str, why: str) -> None:
        placements = await queries.active_placements(s, node=node)
        if placements:
            log.info("node %s: %s: %d placement(s) Lost, to be placed again", node, why, len(placements))
        for placement in placements:
            await self.end(s, placement, "Lost", f"node {node} lease expired")

    async def preempt(self, s: AsyncSession, victims: list[tuple[str, int]], *, by: WorkloadRow) -> None:
        """Stop replicas the scheduler evicted for ``by``; they return to Pending when stopped."""
        for workload_id, replica in victims:
            active = await queries.active_placements(s, workload_id=workload_id, replica=replica)
            self.request_stops(active, f"preempted by {by.name} ({by.id}, priority {by.priority})")
            Store.add_event(
                s,
                "Preempted",
                "workload",
                workload_id,
                f"replica {replica} preempted by {by.name} (priority {by.priority})",
                {"by": by.id},
            )

    async def apply_answer(self, s: AsyncSession, item: Sent) -> None:
        """What an agent's answer to a command means for its placement (``dispatch.ack_effect``)."""
        effect = item.effect
        if effect is AckEffect.NONE:
            return
        placement = await s.get(PlacementRow, item.placement_id)
        if placement is None or placement.status in TERMINAL_PLACEMENT:
            return
        if effect is AckEffect.TOO_LARGE:
            # Resending cannot help: fail the replica with the reason instead of leaving it
            # Scheduled forever (specs accepted by an older hub, or a server with a lower limit).
            await self.end(s, placement, "Failed", f"run command not sent: {item.answer}")
        elif effect is AckEffect.RUN_ACKED:
            placement.acked = True
        elif effect is AckEffect.RUN_REFUSED:
            reason = item.answer.reason if isinstance(item.answer, CommandAckV1) else ""
            await self.end(s, placement, "Lost", f"agent refused: {reason}")
        elif effect is AckEffect.NEVER_RAN:
            await self.end(s, placement, "Cancelled", placement.message or "cancelled")
        elif effect is AckEffect.STOP_ACKED:
            placement.stop_acked = True
