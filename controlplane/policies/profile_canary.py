"""A scheduling profile change rolled out as a canary, reverted by the anomaly-score controller.

The hub's placement profile is a policy too (``controlplane.scheduling.profiles``): a change of
its plugins, weights or action space can make placement slow or impossible for some workloads.
``POST /v1/scheduling-profiles/canary`` names a candidate profile (a built-in name or a profile
mapping); from then on a stable, growing share of the *new workloads* (by the hash of their id,
sticky: a workload keeps its group) is placed with the candidate's plugins, the others with the
profile in force, both over the same nodes and reservations (``Scheduler.schedule(profile=)``).

The signal is the placement delay, the seconds from a workload's first placement attempt to its
first replica's placement: each placed workload is one sample of its group, and every tick the
oldest workload of a group still waiting is one more (its age so far), so a profile that places
nothing is seen while its workloads wait, not only once they are placed. The
:class:`~controlplane.rollout.controller.CanaryController` (the simulator's, unchanged) steps the
share up, promotes the candidate after the last step (it becomes the profile in force:
``Scheduler.use_profile``), or rolls it back when the canary group's score stays over the
threshold while the control group's does not: its waiting workloads go back to the profile in
force and are placed by it. Each decision is an event (``ProfileCanary*``) with the scores.

Kept in the store (``profile_canaries``): the canary is recorded when it is accepted (before the
answer) and with each decision, in the event's transaction. A hub that starts (a restart, or a
standby taking over) places with the newest promoted candidate whose *base* (the ``--scheduler``
profile of the hub that promoted it) is its own ``--scheduler`` profile, so that a promotion lasts
until an operator starts the hub with another profile on purpose; and it resumes a canary still
running from the step it reached (its timeline kept, its windows empty and the step's dwell
restarted), unless the profile in force is no longer the one the canary was compared with: then
the canary is rolled back, with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.errors import ConfigError, ConflictError, NotFoundError, ValidationError
from controlplane.policies.upload import CONTROLLER_FIELDS, steps_field
from controlplane.rollout.controller import (
    CanaryController,
    ClassGuards,
    Group,
    RolloutConfig,
    RolloutEvent,
    rollout_config,
)
from controlplane.rollout.live import LiveRollout
from controlplane.scheduling.profiles import BUILTIN_PROFILES, Profile, load_profile, parse_profile
from controlplane.schema import Custom, Field, Model, Number
from controlplane.store.models import ProfileCanaryRow
from controlplane.store.store import Store

__all__ = [
    "PROFILE_CANARY",
    "ProfileCanaries",
    "ProfileCanary",
    "ProfileCanaryCollector",
    "ProfileCanaryRequest",
    "ProfilePlacer",
    "restore_profile_in_force",
    "workload_bucket",
]

log = logging.getLogger("edgeplane.hub.policy")

TICK_S = 1.0
TRACKED_MAX = 20_000  # workloads whose group is remembered (the oldest forgotten first)
STILL_ASKED_S = 5.0  # a waiting workload the rounds asked about this recently is still waiting


def workload_bucket(workload_id: str) -> int:
    """0-99, fixed per workload: a share of p% takes the workloads below p, and a larger share
    takes those of the smaller one and more."""
    return int(hashlib.sha256(workload_id.encode()).hexdigest()[:8], 16) % 100


class ProfilePlacer(Protocol):
    """What a profile canary needs of the hub's placer (``FrameworkPlacer``)."""

    profile_for: Callable[[str, str], Profile | None] | None
    generation: int
    base_profile: Profile  # the hub's ``--scheduler`` profile

    def use_profile(self, profile: Profile) -> None: ...

    @property
    def current_profile(self) -> Profile: ...


@dataclass(frozen=True, slots=True)
class ProfileCanaryRequest:
    """``POST /v1/scheduling-profiles/canary``: the candidate profile, the steps (percent of new
    workloads) and the controller's rules."""

    profile: Profile
    steps: list[int] = field(default_factory=lambda: [10, 50, 100])
    dwell_s: float = 300.0
    threshold: float = 1.0
    sustain_s: float = 30.0
    min_samples: int = 20
    recent: int = 20
    window: int = 300
    baseline_floor: float = 0.05


def _profile(value: Any, where: str) -> Profile:
    try:
        if isinstance(value, str) and value:
            if value not in BUILTIN_PROFILES:  # never a path: the API reads no file
                names = ", ".join(sorted(BUILTIN_PROFILES))
                raise ValidationError(f"{value!r} is not a built-in profile ({names})", field=where)
            return load_profile(value)
        if isinstance(value, Mapping):
            return parse_profile(dict(value), source="the request")
    except ConfigError as exc:
        raise ValidationError(str(exc), field=where) from None
    raise ValidationError("must be a built-in profile's name or a profile object", field=where)


PROFILE_CANARY: Model[ProfileCanaryRequest] = Model(
    "ProfileCanaryRequest",
    ProfileCanaryRequest,
    (
        Field(
            "profile",
            Custom(
                _profile,
                {
                    "oneOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
                    "description": "a built-in profile's name, or a profile (docs/scheduling.md)",
                },
            ),
            required=True,
            description="the candidate placement profile",
        ),
        steps_field(
            "workloads",
            "the candidate's share of new workloads, step by step (rising); after the last, promote",
        ),
        *CONTROLLER_FIELDS,
        Field(
            "baseline_floor",
            Number("must be a number of seconds from 0 to 60", low=0.0, high=60.0),
            description="the least baseline placement delay, seconds (default 0.05: a hub that places "
            "at once would otherwise call a few milliseconds more an anomaly)",
        ),
    ),
)


class ProfileCanary(LiveRollout):
    """One candidate profile's canary, from its start to its promotion or rollback."""

    def __init__(
        self,
        *,
        candidate: Profile,
        config: RolloutConfig,
        placer: ProfilePlacer,
        store: Store,
        wake: Callable[[], None],
        by: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The outcome guard (LiveRollout's) by the workload's group: a profile that places at once
        # but badly (work that runs slower or fails where it put it) is rolled back by it.
        super().__init__(config, wake=wake, by=by, clock=clock)
        self.candidate = candidate
        self.previous = placer.current_profile
        self.placer = placer
        self.store = store
        # The same two signals per workload kind (batch, service, analytics, inference): a
        # profile that hurts one kind only (a few workloads in the pooled window, under its
        # percentile) is not hidden by the others.
        self.by_kind = ClassGuards(
            config, {"delay": "placement delay", "outcomes": "outcomes against SLA"}, "workloads"
        )
        self._share = 0  # percent of workload buckets in the canary group now
        # Workload id -> [its group, when it was first asked for, placed yet, when last asked, its
        # kind]: sticky groups.
        self._seen: OrderedDict[str, list[Any]] = OrderedDict()
        self._kinds_seen: set[str] = set()
        self.base = placer.base_profile
        self.row_id: int | None = None  # its row in ``profile_canaries`` once recorded

    def profile_for(self, workload_id: str, kind: str = "") -> Profile | None:
        """The placer's question for each workload it places (with the workload's kind): the
        candidate for the canary group, None (the profile in force) for the control group."""
        t = self._t()
        seen = self._seen.get(workload_id)
        if seen is None:
            group: Group = "canary" if workload_bucket(workload_id) < self._share else "control"
            seen = self._seen[workload_id] = [group, t, False, t, kind]
            self._kinds_seen.add(kind)
            while len(self._seen) > TRACKED_MAX:
                self._seen.popitem(last=False)
        seen[3] = t
        return self.candidate if seen[0] == "canary" and self.state == "canary" else None

    def observe_placed(self, workload_id: str, delay_s: float) -> None:
        """A workload's first replica was placed ``delay_s`` after its creation: one sample of its
        group (counted from its first attempt under this canary, for one created before it)."""
        seen = self._seen.get(workload_id)
        if seen is None or seen[2] or self.controller.state != "canary":
            return
        seen[2] = True
        t, value = self._t(), min(delay_s, self._t() - seen[1])
        self.controller.observe(seen[0], value, t)
        self.by_kind.of("delay", seen[4]).observe(seen[0], value, t)

    def observe_outcome(self, node: str, value: float, workload_id: str) -> None:
        """A placement of ``workload_id`` ended, ``value`` its latency over its SLA: one sample of
        the workload's group for the outcome guard (a workload placed before the canary: none)."""
        seen = self._seen.get(workload_id)
        if seen is not None and self.controller.state == "canary":
            self.outcomes.observe(seen[0], value, self._t())
            self.by_kind.of("outcomes", seen[4]).observe(seen[0], value, self._t())

    def _sample_waiting(self, t: float) -> None:
        """The oldest workload of each group still waiting: one sample, its age. Only those the
        placement rounds still ask about count (a cancelled one is no longer asked: the round
        retries an unplaceable workload at least every 2 s, ``placing.RETRY_ALL_S``)."""
        oldest: dict[Group, float] = {}
        oldest_of_kind: dict[tuple[Group, str], float] = {}
        for group, first, placed, asked, kind in self._seen.values():
            if placed or t - asked > STILL_ASKED_S:
                continue
            oldest.setdefault(group, first)  # insertion order: the first unplaced is the oldest
            oldest_of_kind.setdefault((group, kind), first)
            if len(oldest_of_kind) == 2 * len(self._kinds_seen):
                break  # the oldest of every group and kind found        for group, first in oldest.items():
            if t - first > 0:
                self.controller.observe(group, t - first, t)
        for (group, kind), first in oldest_of_kind.items():
            if t - first > 0:
                self.by_kind.of("delay", kind).observe(group, t - first, t)

    async def tick(self) -> None:
        t = self._t()
        if self.controller.state == "canary":
            self._sample_waiting(t)
        await self._decide(self._guards(), t)

    def _guards(self) -> list[tuple[CanaryController, str]]:
        return [(self.outcomes, "outcomes against SLA"), *self.by_kind.guards()]

    async def _act(self, kind: str, fraction: float, reason: str, data: dict[str, Any]) -> None:
        if kind in ("start", "step"):
            self._share = max(1, round(fraction * 100))
            self.placer.profile_for = self.profile_for
        else:
            self.placer.profile_for = None
            if kind == "promote":
                self.placer.use_profile(self.candidate)
            else:
                self.placer.generation += 1  # its waiting workloads are tried again, by the profile in force
        self.wake()
        names = {
            "start": "ProfileCanaryStarted",
            "step": "ProfileCanaryStep",
            "promote": "ProfileCanaryPromoted",
        }
        async with self.store.session() as session:
            await self._keep(session, kind, fraction)
            Store.add_event(
                session,
                names.get(kind, "ProfileCanaryRolledBack"),
                "profile",
                self.candidate.name[:63],
                f"scheduling profile {self.candidate.name!r} canary: {kind} at {fraction:.0%}: {reason}",
                {**data, "profile": self.candidate.name, "previous": self.previous.name},
            )
            session.info["wrote"] = True
        log.info(
            "scheduling profile %r canary: %s at %.0f%% (%s)",
            self.candidate.name, kind, 100 * fraction, reason,
        )  # fmt: skip

    async def _row(self, session: AsyncSession) -> ProfileCanaryRow:
        row = await session.get(ProfileCanaryRow, self.row_id) if self.row_id is not None else None
        if row is None:
            row = ProfileCanaryRow(
                name=self.candidate.name[:63],
                candidate=self.candidate.to_dict(),
                previous=self.previous.to_dict(),
                base=self.base.to_dict(),
                config=self.controller.config.to_json(),
                started_at=self.started_at,
                started_by=self.by[:63],
            )
            session.add(row)
        return row

    async def record_start(self, session: AsyncSession) -> None:
        """The accepted canary, before anything was done: a hub that stops now leaves it to the
        next one, which starts it (:meth:`resumed`)."""
        row = await self._row(session)
        row.state, row.step, row.fraction, row.events = "canary", 0, 0.0, []
        row.updated_at = time.time()
        await session.flush()
        self.row_id = row.id

    async def _keep(self, session: AsyncSession, kind: str, fraction: float) -> None:
        """The canary as it is once this decision is acted on, in the event's transaction."""
        row = await self._row(session)
        row.state = {"promote": "promoted", "rollback": "rolled_back"}.get(kind, "canary")
        row.step = self.controller.step
        row.fraction = fraction
        row.events = [e.to_dict() for e in self.controller.events[: self.acted + 1]]
        row.updated_at = time.time()
        await session.flush()
        self.row_id = row.id

    @classmethod
    def resumed(
        cls,
        row: ProfileCanaryRow,
        *,
        placer: ProfilePlacer,
        store: Store,
        wake: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> ProfileCanary:
        """The canary ``row`` kept, going on from the step it reached: its timeline as it was,
        its clock counting from its first start, its windows empty and its step's dwell started
        again. Its share is in force when this returns (a workload keeps the group of its hash)."""
        config = RolloutConfig.from_json(row.config)
        canary = cls(
            candidate=parse_profile(row.candidate, source=f"profile canary {row.id}"),
            config=config,
            placer=placer,
            store=store,
            wake=wake,
            by=row.started_by,
            clock=clock,
        )
        canary.row_id = row.id
        if canary._resume(
            config, started_at=row.started_at, step=row.step, fraction=row.fraction, events=row.events
        ):  # its share in force now
            canary._share = max(1, round(row.fraction * 100))
            placer.profile_for = canary.profile_for
            placer.generation += 1
        return canary

    async def run(self) -> None:
        """Tick until promoted or rolled back (the first tick, its start, is the caller's)."""
        try:
            while self.state == "canary":
                await asyncio.sleep(TICK_S)
                try:
                    await self.tick()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the store away: the same decision again at the next tick
                    log.warning("scheduling profile canary: could not act: %s", exc)
        except asyncio.CancelledError:
            self.placer.profile_for = None  # the hub stops: no workload keeps the candidate
            raise
        except Exception as exc:
            self.failure = str(exc)
            self.placer.profile_for = None
            self.placer.generation += 1
            log.exception("scheduling profile canary stopped")

    def describe(self) -> dict[str, Any]:
        described = self.controller.describe()
        canary, control = self.controller.scores
        return {
            "profile": self.candidate.name,
            "previous": self.previous.name,
            "state": self.state,
            "fraction": self.fraction,
            "samples": described["samples"],
            "scores": {"canary": canary, "control": control},
            "outcome_samples": dict(self.outcomes.samples),
            "outcome_scores": dict(zip(("canary", "control"), self.outcomes.scores, strict=True)),
            "classes": self.by_kind.describe(),
            "events": described["events"][: self.acted],
            "failure": self.failure,
        }


class ProfileCanaries:
    """At most one profile canary at a time; the last one stays readable."""

    def __init__(
        self,
        placer: ProfilePlacer | None,
        store: Store,
        wake: Callable[[], None],
        *,
        outcome_listeners: list[Callable[[str, float, str], None]] | None = None,
    ) -> None:
        self.placer = placer
        self.store = store
        self.wake = wake
        # The hub's placement outcome listeners: a running canary's outcome guard is one of them.
        self.outcome_listeners = outcome_listeners
        self.last: ProfileCanary | None = None
        self._task: asyncio.Task[None] | None = None

    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self, request: ProfileCanaryRequest, *, by: str) -> ProfileCanary:
        """Start a canary: its first share is in force when this returns."""
        if self.placer is None:
            raise ConflictError("this hub's placer does not take scheduling profile canaries")
        if self.running():
            raise ConflictError("a scheduling profile canary is running; wait for it to end")
        current = self.placer.current_profile
        if request.profile.to_dict() == current.to_dict():
            raise ValidationError(f"profile {current.name!r} is already the one in force", field="profile")
        try:
            config = rollout_config(request)
        except ValueError as exc:  # the parser checks each field; this is a last line
            raise ValidationError(str(exc), field="<body>") from None
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        canary = ProfileCanary(
            candidate=request.profile,
            config=config,
            placer=self.placer,
            store=self.store,
            wake=self.wake,
            by=by,
        )
        async with self.store.session() as session:  # accepted: kept before the answer
            await canary.record_start(session)
            session.info["wrote"] = True
        self.last = canary
        self._task = asyncio.create_task(self._run(canary), name="profile-canary")
        await asyncio.shield(self._started)
        return canary

    async def _run(self, canary: ProfileCanary) -> None:
        try:
            if canary.acted == 0:
                await canary.tick()  # its start: the first share
        except Exception as exc:
            self._started.set_exception(exc)
            raise
        self._started.set_result(None)
        listeners = self.outcome_listeners if self.outcome_listeners is not None else []
        listeners.append(canary.observe_outcome)
        try:
            await canary.run()
        finally:
            listeners.remove(canary.observe_outcome)

    async def describe(self) -> dict[str, Any]:
        """The canary of this hub, else the newest one the store kept (one that ended under an
        earlier hub: its timeline and share, no scores)."""
        if self.last is not None:
            return self.last.describe()
        async with self.store.session() as session:
            row = await session.scalar(select(ProfileCanaryRow).order_by(ProfileCanaryRow.id.desc()).limit(1))
        if row is None:
            raise NotFoundError("no scheduling profile canary has run", field="canary")
        return {
            "profile": row.name,
            "previous": str(row.previous.get("name", "")),
            "state": row.state,
            "fraction": row.fraction,
            "samples": {"canary": 0, "control": 0},
            "scores": {"canary": 0.0, "control": 0.0},
            "outcome_samples": {"canary": 0, "control": 0},
            "outcome_scores": {"canary": 0.0, "control": 0.0},
            "classes": [],
            "events": list(row.events),
            "failure": "" if row.state != "canary" else "not running on this hub (it resumes at a start)",
        }

    async def resume(self) -> ProfileCanary | None:
        """Go on with the canary the store says is running (a restart, or a standby that took
        over), if any. One compared with another profile than the one in force now (the hub
        started with another ``--scheduler``) is rolled back instead, with that reason."""
        if self.placer is None:
            return None
        async with self.store.session() as session:
            rows = list(
                await session.scalars(
                    select(ProfileCanaryRow)
                    .where(ProfileCanaryRow.state == "canary")
                    .order_by(ProfileCanaryRow.id)
                )
            )
            current = self.placer.current_profile
            stale = list(rows[:-1])  # one at a time: only the newest can still be running
            if rows and rows[-1].previous != current.to_dict():
                stale.append(rows[-1])
            for row in stale:
                reason = (
                    f"the hub started with profile {current.name!r} in force, not "
                    f"{row.previous.get('name')!r} that the canary was compared with"
                )
                _end(session, row, reason)
            if stale:
                session.info["wrote"] = True
        running = [r for r in rows if r not in stale]
        if not running:
            return None
        row = running[-1]
        canary = ProfileCanary.resumed(row, placer=self.placer, store=self.store, wake=self.wake)
        self.last = canary
        self._started = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(canary), name="profile-canary")
        await asyncio.shield(self._started)
        self.wake()
        log.warning(
            "scheduling profile %r canary resumed at %.0f%% of new workloads (step %d); its scores "
            "start afresh",
            canary.candidate.name, 100 * canary.fraction, canary.controller.step + 1,
        )  # fmt: skip
        return canary

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def _end(session: AsyncSession, row: ProfileCanaryRow, reason: str) -> None:
    """Roll back a kept canary that cannot go on, with an event that says why."""
    t_s = max(0.0, time.time() - row.started_at)
    event = RolloutEvent(t_s, "rollback", 0.0, 0.0, 0.0, None, reason)
    row.state, row.fraction = "rolled_back", 0.0
    row.events = [*row.events, event.to_dict()]
    row.updated_at = time.time()
    Store.add_event(
        session,
        "ProfileCanaryRolledBack",
        "profile",
        row.name,
        f"scheduling profile {row.name!r} canary: rollback: {reason}",
        {**event.to_dict(), "profile": row.name, "previous": row.previous.get("name")},
    )


async def restore_profile_in_force(store: Store, placer: ProfilePlacer) -> Profile | None:
    """At a hub's start, before it places: the newest profile a canary promoted over this hub's
    own ``--scheduler`` profile becomes the one in force again (returned); None when there is
    none, or when the newest promotion was over another base (an operator who starts the hub with
    another profile means it: that one stays, with a warning)."""
    async with store.session() as session:
        row = await session.scalar(
            select(ProfileCanaryRow)
            .where(ProfileCanaryRow.state == "promoted")
            .order_by(ProfileCanaryRow.id.desc())
            .limit(1)
        )
    if row is None:
        return None
    base = placer.base_profile
    if row.base != base.to_dict():
        log.warning(
            "scheduling profile %r was promoted over %r; this hub starts with %r, which stays in force",
            row.name, row.base.get("name"), base.name,
        )  # fmt: skip
        return None
    try:
        profile = parse_profile(row.candidate, source=f"profile canary {row.id}")
    except ConfigError as exc:  # a plugin this version no longer has
        log.warning("promoted scheduling profile %r unusable (%s); %r stays", row.name, exc, base.name)
        return None
    placer.use_profile(profile)
    log.info("scheduling profile %r in force (promoted by a canary over %r)", profile.name, base.name)
    return profile


class ProfileCanaryCollector(Collector):
    """The last profile canary in ``/metrics``: its state, share, both groups' placement-delay
    anomaly scores and samples, labelled by the candidate profile."""

    def __init__(self, canaries: ProfileCanaries) -> None:
        self.canaries = canaries

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = GaugeMetricFamily(
            "edgeplane_profile_canary_state",
            "1 for the state the last scheduling profile canary is in",
            labels=["profile", "state"],
        )
        share = GaugeMetricFamily(
            "edgeplane_profile_canary_fraction",
            "The share of new workloads the candidate profile places",
            labels=["profile"],
        )
        score = GaugeMetricFamily(
            "edgeplane_profile_canary_score",
            "The anomaly score of the canary's and the control group's placement delays",
            labels=["profile", "group"],
        )
        outcome = GaugeMetricFamily(
            "edgeplane_profile_canary_outcome_score",
            "The anomaly score of the canary's and the control group's outcomes against SLA",
            labels=["profile", "group"],
        )
        samples = GaugeMetricFamily(
            "edgeplane_profile_canary_samples",
            "Placement-delay samples counted, by group",
            labels=["profile", "group"],
        )
        canary = self.canaries.last
        if canary is not None:
            described = canary.describe()
            name = described["profile"]
            for option in ("canary", "promoted", "rolled_back"):
                state.add_metric([name, option], 1.0 if described["state"] == option else 0.0)
            share.add_metric([name], float(described["fraction"]))
            for group in ("canary", "control"):
                score.add_metric([name, group], float(described["scores"][group]))
                outcome.add_metric([name, group], float(described["outcome_scores"][group]))
                samples.add_metric([name, group], float(described["samples"][group]))
        yield from (state, share, score, outcome, samples)
