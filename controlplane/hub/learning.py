"""Live interference learning: what agents observed of successful runs, fed to the scheduler.

An agent's Succeeded report carries a :class:`~edgeplane_contract.messages.RuntimeObservation`
(the final run's runtime, and the seconds its node spent in each CPU-load bin meanwhile). When a
placement *becomes* Succeeded (``hub.workloads.PlacementBook``; a replayed or duplicated report
finds it already ended and changes nothing) the hub:

1. ignores and counts an observation that fails :meth:`RuntimeObservation.invalid` (the report's
   state is still applied: refusing the report would leave the agent resending it forever);
2. compares the runtime with the workload's solo runtime: ``expected_runtime_s`` of its spec when
   the user gave one, else the workload's own history: the fastest runtime among the stored
   observations of workloads of the same name and kind whose run was *quiet* (at least
   ``QUIET_SHARE`` of its time below the lowest candidate knee, where no knee on the estimator's
   grid sees contention). No such run yet: the observation is stored (it may become the baseline
   of later runs) but not fed. ``timeout_s`` is a bound, not an estimate, so it is never used;
3. stores it (one row per placement: the unique placement id is the second guard against a
   double count) and, once the transaction has committed, feeds the scheduler's estimator
   (:meth:`Placer.observe_runtime`); a failed commit feeds nothing (the agent sends it again).

Persistence: the observations themselves (the last ``keep``, 5,000 by default), replayed into the
estimator in arrival order at start, rather than the estimator's sufficient statistics. The
statistics depend on the estimator's model (its knee grid, features, clipping, prior), which can
change between versions: raw observations refit under whatever model the hub runs now, and they
are what the history baseline reads anyway. 5,000 replays cost a few tens of milliseconds.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.messages import RuntimeObservation

from controlplane.hub.placement import Placer
from controlplane.hub.spec_cache import SpecCache
from controlplane.scheduling.interference import KNEE_GRID, InterferenceEstimate
from controlplane.scheduling.sla_risk import SlaRiskTable
from controlplane.store.models import PlacementRow, RuntimeObservationRow

__all__ = ["DEFAULT_KEEP", "OUTCOMES", "QUIET_SHARE", "InterferenceLearning", "quiet"]

log = logging.getLogger("edgeplane.hub.learning")

DEFAULT_KEEP = 5000
QUIET_SHARE = 0.9
# What became of each observation a success carried (the metric's label values).
OUTCOMES = ("learned", "no_baseline", "ignored", "invalid")


def quiet(load_seconds: list[float]) -> bool:
    """Whether nearly all of a run (``QUIET_SHARE``) had the CPU below the lowest candidate knee."""
    total = sum(load_seconds)
    bins = len(load_seconds)
    if total <= 0 or bins == 0:
        return False
    below = sum(s for j, s in enumerate(load_seconds) if (j + 1) / bins <= KNEE_GRID[0])
    return below >= QUIET_SHARE * total


@dataclass(frozen=True, slots=True)
class _Feed:
    kind: str
    expected_s: float
    runtime_s: float
    load_seconds: list[float]


class InterferenceLearning:
    """Stores observations and feeds them to ``placer``; see the module docstring. Its methods run
    inside the hub's lock (``record`` in the caller's transaction, then ``commit`` or ``discard``)."""

    def __init__(self, placer: Placer, *, keep: int = DEFAULT_KEEP, specs: SpecCache | None = None) -> None:
        """``specs``: the hub's parsed workload specs (a success reads its workload's)."""
        self.placer = placer
        self.keep = keep
        self.specs = specs if specs is not None else SpecCache()  # an empty cache is falsy
        self.outcomes: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
        self._pending: list[_Feed] = []
        self._estimate: InterferenceEstimate | None = None
        self._fed = 0  # observations the estimator took (the cached estimate's age)
        self._estimated_at = -1
        self._risk: SlaRiskTable | None = None
        self._risk_at = -1

    async def load(self, s: AsyncSession) -> int:
        """Replay the stored observations into the estimator (hub start); how many it took."""
        rows = (
            await s.scalars(
                select(RuntimeObservationRow)
                .where(RuntimeObservationRow.expected_s.is_not(None))
                .order_by(RuntimeObservationRow.id)
            )
        ).all()
        taken = 0
        for row in rows:
            assert row.expected_s is not None
            seconds = [float(x) for x in row.load_seconds]
            taken += self.placer.observe_runtime(row.kind, row.expected_s, row.runtime_s, seconds)
        self._fed += taken
        if taken:
            self.placer.interference(use=True)  # the scores use the replayed fit from the start
            self.placer.sla_risk(use=True)  # and the replayed risk
        log.info("interference: %d stored observation(s) replayed", taken)
        return taken

    async def record(
        self, s: AsyncSession, placement: PlacementRow, observation: RuntimeObservation | None
    ) -> None:
        """A placement just became Succeeded with ``observation`` (None: the agent had none)."""
        await self.record_many(s, [(placement, observation)])

    async def record_many(
        self, s: AsyncSession, successes: Sequence[tuple[PlacementRow, RuntimeObservation | None]]
    ) -> None:
        """Placements that just became Succeeded, in the order they did, in a few statements
        whatever their number: one read of those already stored, the specs, one read of the
        history baselines the batch needs, one insert and one trim. Each observation's baseline
        counts the quiet runs stored before it, those earlier in the same batch included; the trim
        to the last ``keep`` runs once, at the end of the batch."""
        valid: list[tuple[PlacementRow, RuntimeObservation]] = []
        for placement, observation in successes:
            if observation is None:
                continue
            why = observation.invalid()
            if why is not None:
                self.outcomes["invalid"] += 1
                log.warning(
                    "ignored the runtime observation of %s on %s: %s", placement.id, placement.node, why
                )
                continue
            valid.append((placement, observation))
        if not valid:
            return
        known = set(
            await s.scalars(
                select(RuntimeObservationRow.placement_id).where(
                    RuntimeObservationRow.placement_id.in_({p.id for p, _ in valid})
                )
            )
        )
        specs = await self.specs.load(s, {p.workload_id for p, _ in valid})
        wanted = [(p, o, specs[p.workload_id]) for p, o in valid if p.workload_id in specs]
        fastest = await self._baselines(
            s, {(spec.name, spec.scheduler_kind()) for *_, spec in wanted if spec.expected_runtime_s is None}
        )
        rows: list[dict[str, Any]] = []
        now = time.time()
        for placement, observation, spec in wanted:
            if placement.id in known:
                continue
            known.add(placement.id)
            kind = spec.scheduler_kind()
            expected = spec.expected_runtime_s
            if expected is None:
                expected = fastest.get((spec.name, kind))
            seconds = list(observation.load_seconds)
            is_quiet = quiet(seconds)
            rows.append(
                {
                    "placement_id": placement.id,
                    "workload_id": placement.workload_id,
                    "workload_name": spec.name,
                    "kind": kind,
                    "node": placement.node,
                    "runtime_s": observation.runtime_s,
                    "expected_s": expected,
                    "load_seconds": seconds,
                    "quiet": is_quiet,
                    "cpu_pressure": observation.cpu_pressure,
                    "observed_at": now,
                }
            )
            if is_quiet:  # a baseline for the runs after it in this batch, as once it is stored
                key = (spec.name, kind)
                best = fastest.get(key)
                fastest[key] = observation.runtime_s if best is None else min(best, observation.runtime_s)
            if expected is None:
                self.outcomes["no_baseline"] += 1
            else:
                self._pending.append(_Feed(kind, expected, observation.runtime_s, seconds))
        if not rows:
            return
        await s.execute(insert(RuntimeObservationRow), rows)
        newest = select(func.max(RuntimeObservationRow.id)).scalar_subquery()
        await s.execute(delete(RuntimeObservationRow).where(RuntimeObservationRow.id <= newest - self.keep))

    async def _baselines(self, s: AsyncSession, keys: set[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """The fastest quiet run stored of workloads of each (name, kind) in ``keys`` (a key with
        none is left out), in one read."""
        if not keys:
            return {}
        rows = await s.execute(
            select(
                RuntimeObservationRow.workload_name,
                RuntimeObservationRow.kind,
                func.min(RuntimeObservationRow.runtime_s),
            )
            .where(
                RuntimeObservationRow.workload_name.in_({name for name, _ in keys}),
                RuntimeObservationRow.quiet.is_(True),
            )
            .group_by(RuntimeObservationRow.workload_name, RuntimeObservationRow.kind)
        )
        return {
            (name, kind): float(best)
            for name, kind, best in rows
            if (name, kind) in keys and best is not None
        }

    def commit(self) -> None:
        """The transaction that stored the pending observations committed: feed them."""
        pending, self._pending = self._pending, []
        for feed in pending:
            took = self.placer.observe_runtime(feed.kind, feed.expected_s, feed.runtime_s, feed.load_seconds)
            self.outcomes["learned" if took else "ignored"] += 1
            self._fed += took

    def discard(self) -> None:
        """The transaction failed: nothing it stored is fed (the agent sends the report again)."""
        self._pending.clear()

    def risk(self) -> SlaRiskTable | None:
        """The SLA-miss risk learned so far (None: the hub's profile does not weigh it)."""
        if self._risk_at != self._fed or self._risk is None:
            self._risk = self.placer.sla_risk()
            self._risk_at = self._fed
        return self._risk

    def estimate(self) -> InterferenceEstimate | None:
        """The current estimate (None: the hub's profile does not learn), refitted only when an
        observation arrived since the last call (metrics and the API read it often)."""
        if self._estimated_at != self._fed or self._estimate is None:
            self._estimate = self.placer.interference()
            self._estimated_at = self._fed
        return self._estimate
