"""The live canary: a policy version goes to a growing share of the nodes, step by step, while
the :class:`~controlplane.rollout.controller.CanaryController` (the simulator's, unchanged)
compares the regret of the canary nodes' decisions with the others'; it promotes the version
after the last step, or rolls it back when the canary's anomaly score stays over the threshold
while the control's does not.

Samples are the nodes' own audits (edge_agent/decision_quality.py): each heartbeat carries the
mean regret, under the objective both sides share, of the decisions audited since the last one.
A node counts as canary while its heartbeats say it runs the version, as control while it runs
another; one still on its way to the version is not counted.

Shares become nodes in the order of a hash of their names (the nodes of 10% are among those of
50%): at least one, and one left for the control group until the last step. Every decision is an
event (``CanaryStarted``, ``CanaryStep``, ``CanaryPromoted``, ``CanaryRolledBack``, with both
scores and the baseline) and the state is in ``/metrics``. Each event is kept in the store with
the canary's step, share and nodes (``policy_canaries``, in the event's transaction), and a hub
that starts (a restart, or a standby taking over from a leader that died) resumes the canary
still running from the step it reached: its timeline and nodes as they were, its anomaly windows
empty and the step's dwell started again, so that it judges only what it sees from then on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.errors import ConflictError, NotFoundError
from controlplane.fleet.nodes import NodeLive
from controlplane.policies.registry import PolicyRegistry
from controlplane.rollout.controller import (
    ClassGuards,
    Group,
    RolloutConfig,
    guard,
)
from controlplane.rollout.live import LiveRollout
from controlplane.store.models import PolicyCanaryRow
from controlplane.store.store import Store

__all__ = ["CanaryRollouts", "LiveCanary", "bucket"]

log = logging.getLogger("edgeplane.hub.policy")

TICK_S = 1.0
#: A battery-drain sample per node this often, over this span (a level moves in whole percents:
#: a 10 %/h drain moves it 1.7 points in 10 minutes).
DRAIN_WINDOW_S = 60.0
DRAIN_SPAN_S = 600.0


def bucket(node: str) -> int:
    """0-99, fixed per name: a percent rollout picks the same nodes each time, and more of them
    as the percent rises (the nodes of 10% are among those of 20%)."""
    return int(hashlib.sha256(node.encode()).hexdigest()[:8], 16) % 100


class CanaryHub(Protocol):
    @property
    def nodes(self) -> Mapping[str, NodeLive]: ...

    @property
    def policy_regret_listeners(self) -> list[Callable[[NodeLive, float], None]]: ...

    @property
    def placement_outcome_listeners(self) -> list[Callable[[str, float, str], None]]: ...

    @property
    def power_listeners(self) -> list[Callable[[NodeLive, str, float | None], None]]: ...

    @property
    def energy_listeners(self) -> list[Callable[[str, float, str], None]]: ...


class LiveCanary(LiveRollout):
    """One version's canary, from its start to its promotion or rollback."""

    def __init__(
        self,
        *,
        version: int,
        config: RolloutConfig,
        registry: PolicyRegistry,
        hub: CanaryHub,
        wake: Callable[[], None],
        by: str,
        clock: Callable[[], float] = time.monotonic,
        drain_window_s: float = DRAIN_WINDOW_S,
        drain_span_s: float = DRAIN_SPAN_S,
    ) -> None:
        super().__init__(config, wake=wake, by=by, clock=clock)
        self.version = version
        self.registry = registry
        self.hub = hub
        # The guards beside the outcomes' (LiveRollout): the same rules over other samples of
        # each group's nodes. Energy: the battery drain (percent per hour) of the group's nodes
        # on battery, one sample per node per ``drain_window_s``.
        self.drain = guard(config)
        # Energy per workload: each placement that ends Succeeded on a group's node, its mean
        # draw per requested vCPU while it ran (the node's reported power shared among its
        # placements: controlplane/fleet/energy.py).
        self.energy = guard(config)
        # The signals per node type (edge boards, servers, ...), each judged on its own: a
        # version that hurts one class of node only is not hidden by the others.
        self.by_type = ClassGuards(
            config,
            {
                "regret": "decision regret",
                "outcomes": "outcomes against SLA",
                "drain": "battery drain",
                "energy": "energy per workload",
            },
            "nodes",
        )
        self._pooled = (
            (self.outcomes, "outcomes against SLA"),
            (self.drain, "battery drain"),
            (self.energy, "energy per workload"),
        )
        self.drain_window_s = drain_window_s
        self.drain_span_s = drain_span_s
        self._levels: dict[str, deque[tuple[float, float]]] = {}  # node -> (t, battery %) on battery
        self._drain_sampled: dict[str, float] = {}  # node -> when its last sample was taken
        self.nodes: list[str] = []

    def _group(self, live: NodeLive | None) -> Group | None:
        """The group a node's sample counts in while the canary runs (None: not counted): canary
        while its heartbeats say it runs the version, control while it runs another, neither
        while it is told to run it and not there yet."""
        if self.controller.state != "canary" or live is None:
            return None
        if live.policy_version == self.version:
            return "canary"
        return None if live.name in self.nodes else "control"

    def observe(self, live: NodeLive, regret: float) -> None:
        group = self._group(live)
        if group is not None:
            self.controller.observe(group, regret, self._t())
            self.by_type.of("regret", live.node_type).observe(group, regret, self._t())

    def observe_outcome(self, node: str, value: float, workload_id: str = "") -> None:
        live = self.hub.nodes.get(node)
        group = self._group(live)
        if group is not None and live is not None:
            self.outcomes.observe(group, value, self._t())
            self.by_type.of("outcomes", live.node_type).observe(group, value, self._t())

    def observe_energy(self, node: str, watts_per_vcpu: float, workload_id: str = "") -> None:
        """A placement that ended Succeeded on ``node``: its mean draw per requested vCPU."""
        live = self.hub.nodes.get(node)
        group = self._group(live)
        if group is not None and live is not None:
            self.energy.observe(group, watts_per_vcpu, self._t())
            self.by_type.of("energy", live.node_type).observe(group, watts_per_vcpu, self._t())

    def observe_power(self, live: NodeLive, source: str, battery_percent: float | None) -> None:
        """A heartbeat's power. On battery, every ``drain_window_s`` the node's drain over the
        last ``drain_span_s`` (percent per hour, none gained back; a span long enough that whole
        percents do not hide the rate) is one sample of its group; a node on mains, or without a
        battery level, starts again."""
        t = self._t()
        if source != "battery" or battery_percent is None:
            self._levels.pop(live.name, None)
            return
        levels = self._levels.setdefault(live.name, deque())
        levels.append((t, battery_percent))
        while len(levels) > 2 and levels[1][0] <= t - self.drain_span_s:
            levels.popleft()  # keep one reading at or before the span's start
        since, level = levels[0]
        last = self._drain_sampled.get(live.name, -math.inf)
        if t - since < self.drain_span_s or t - last < self.drain_window_s:
            return
        self._drain_sampled[live.name] = t
        group = self._group(live)
        if group is not None:
            drain = max(0.0, level - battery_percent) * 3600.0 / (t - since)
            self.drain.observe(group, drain, t)
            self.by_type.of("drain", live.node_type).observe(group, drain, t)

    async def tick(self) -> None:
        """Let the controller judge on the clock, and act on what it decided since the last tick."""
        await self._decide([*self._pooled, *self.by_type.guards()], self._t())

    async def _act(self, kind: str, fraction: float, reason: str, data: dict[str, Any]) -> None:
        if kind in ("start", "step"):
            self.nodes = self._share(fraction)
            await self.registry.assign(self.version, self.nodes, by=f"canary ({self.by})")
        elif kind == "promote":
            await self.registry.promote(self.version, by=f"canary ({self.by})")
        elif kind == "rollback":
            await self.registry.rollback(self.version, by=f"canary ({self.by})", reason=reason)
        self.wake()
        names = {"start": "CanaryStarted", "step": "CanaryStep", "promote": "CanaryPromoted"}
        async with self.registry.store.session() as session:
            await self._keep(session, kind, fraction)
            Store.add_event(
                session,
                names.get(kind, "CanaryRolledBack"),
                "policy",
                str(self.version),
                f"policy v{self.version} canary: {kind} at {fraction:.0%}: {reason}",
                {**data, "nodes": self.nodes},
            )
            session.info["wrote"] = True
        log.info("policy v%d canary: %s at %.0f%% (%s)", self.version, kind, 100 * fraction, reason)

    def _config_json(self) -> dict[str, Any]:
        """What the store keeps of the configuration: the rules and the energy guard's timing."""
        drain = {"window_s": self.drain_window_s, "span_s": self.drain_span_s}
        return {**self.controller.config.to_json(), "drain": drain}

    async def _row(self, session: AsyncSession) -> PolicyCanaryRow:
        """The canary's row (a new one where there is none), its start as this canary's."""
        row = await session.get(PolicyCanaryRow, self.version)
        if row is None:
            row = PolicyCanaryRow(version=self.version)
            session.add(row)
        row.config = self._config_json()
        row.started_at = self.started_at
        row.started_by = self.by[:63]
        return row

    async def record_start(self, session: AsyncSession) -> None:
        """The accepted canary, before anything was done: a hub that stops now leaves it to the
        next one, which starts it (:meth:`resumed`)."""
        row = await self._row(session)
        row.state, row.step, row.fraction, row.nodes, row.events = "canary", 0, 0.0, [], []
        row.updated_at = time.time()

    async def _keep(self, session: AsyncSession, kind: str, fraction: float) -> None:
        """The canary as it is once this event is acted on, in the event's transaction: what a
        hub that starts next resumes (:meth:`CanaryRollouts.resume`)."""
        row = await self._row(session)
        row.state = {"promote": "promoted", "rollback": "rolled_back"}.get(kind, "canary")
        row.step = self.controller.step
        row.fraction = fraction
        row.nodes = list(self.nodes)
        row.events = [e.to_dict() for e in self.controller.events[: self.acted + 1]]
        row.updated_at = time.time()

    def _share(self, fraction: float) -> list[str]:
        """The first ``fraction`` of the nodes in the order of their hash (the same order at each
        step, so a step only adds nodes): at least one, and short of the last step at least one
        left for the control group."""
        names = sorted(self.hub.nodes, key=lambda n: (bucket(n), n))
        count = max(1, math.floor(fraction * len(names) + 0.5))
        if fraction < 1.0 and len(names) > 1:
            count = min(count, len(names) - 1)
        return sorted(names[:count])

    async def run(self) -> None:
        self.hub.policy_regret_listeners.append(self.observe)
        self.hub.placement_outcome_listeners.append(self.observe_outcome)
        self.hub.power_listeners.append(self.observe_power)
        self.hub.energy_listeners.append(self.observe_energy)
        try:
            await self.tick()  # the start: the first share
            while self.state == "canary":
                await asyncio.sleep(TICK_S)
                try:
                    await self.tick()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the store away: the same decision again at the next tick
                    log.warning("policy v%d canary: could not act: %s", self.version, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = str(exc)
            log.exception("policy v%d canary stopped", self.version)
        finally:
            self.hub.policy_regret_listeners.remove(self.observe)
            self.hub.placement_outcome_listeners.remove(self.observe_outcome)
            self.hub.power_listeners.remove(self.observe_power)
            self.hub.energy_listeners.remove(self.observe_energy)

    @classmethod
    def resumed(
        cls,
        row: PolicyCanaryRow,
        *,
        registry: PolicyRegistry,
        hub: CanaryHub,
        wake: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> LiveCanary:
        """The canary ``row`` kept, going on from the step it reached: its timeline and nodes as
        they were, its clock counting from its first start, its windows empty and its step's
        dwell started again (it judges only what it sees from now on)."""
        config = RolloutConfig.from_json(row.config)
        drain = row.config.get("drain", {})
        canary = cls(
            version=row.version,
            config=config,
            registry=registry,
            hub=hub,
            wake=wake,
            by=row.started_by,
            clock=clock,
            drain_window_s=float(drain.get("window_s", DRAIN_WINDOW_S)),
            drain_span_s=float(drain.get("span_s", DRAIN_SPAN_S)),
        )
        if canary._resume(
            config, started_at=row.started_at, step=row.step, fraction=row.fraction, events=row.events
        ):
            canary.nodes = list(row.nodes)
        return canary

    def describe(self) -> dict[str, Any]:
        """What has been done so far: the state, share and events acted on, the scores now."""
        described = self.controller.describe()
        canary, control = self.controller.scores
        return {
            "version": self.version,
            **described,
            "state": self.state,
            "fraction": self.fraction,
            "events": described["events"][: self.acted],
            "scores": {"canary": canary, "control": control},
            "outcome_scores": dict(zip(("canary", "control"), self.outcomes.scores, strict=True)),
            "outcome_samples": dict(self.outcomes.samples),
            "drain_scores": dict(zip(("canary", "control"), self.drain.scores, strict=True)),
            "drain_samples": dict(self.drain.samples),
            "energy_scores": dict(zip(("canary", "control"), self.energy.scores, strict=True)),
            "energy_samples": dict(self.energy.samples),
            "classes": self.by_type.describe(),
            "nodes": list(self.nodes),
            "failure": self.failure,
        }


class CanaryRollouts:
    """At most one live canary at a time; the finished ones stay readable."""

    def __init__(
        self,
        registry: PolicyRegistry,
        hub: CanaryHub,
        wake: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.hub = hub
        self.wake = wake
        self.clock = clock
        self.canaries: dict[int, LiveCanary] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def active(self) -> LiveCanary | None:
        for version, task in self._tasks.items():
            if not task.done():
                return self.canaries[version]
        return None

    async def start(
        self,
        version: int,
        config: RolloutConfig,
        *,
        by: str,
        drain: tuple[float, float] = (DRAIN_WINDOW_S, DRAIN_SPAN_S),
    ) -> LiveCanary:
        """Start ``version``'s canary (``drain``: the energy guard's sample window and span, s)."""
        row = await self.registry.get(version)
        running = self.active()
        if running is not None:
            raise ConflictError(f"policy v{running.version}'s canary is still running", field="version")
        if row.state != "available":
            raise ConflictError(
                f"policy v{version} is {row.state}: only an available version goes to a canary",
                field="version",
            )
        canary = LiveCanary(
            version=version,
            config=config,
            registry=self.registry,
            hub=self.hub,
            wake=self.wake,
            by=by,
            clock=self.clock,
            drain_window_s=drain[0],
            drain_span_s=drain[1],
        )
        async with self.registry.store.session() as session:  # accepted: kept before the answer
            await canary.record_start(session)
        self.canaries[version] = canary
        self._tasks[version] = asyncio.create_task(canary.run(), name=f"policy-canary-v{version}")
        await asyncio.sleep(0)  # its first share is assigned before the answer where it can be
        return canary

    def get(self, version: int) -> LiveCanary:
        canary = self.canaries.get(version)
        if canary is None:
            raise NotFoundError(f"policy v{version} has had no canary since the hub started", field="version")
        return canary

    async def describe(self, version: int) -> dict[str, Any]:
        """The version's canary: the live one's description, else the last one the store kept (a
        canary that ended under an earlier hub: its timeline, share and nodes; no scores)."""
        canary = self.canaries.get(version)
        if canary is not None:
            return canary.describe()
        async with self.registry.store.session() as session:
            row = await session.get(PolicyCanaryRow, version)
        if row is None:
            raise NotFoundError(f"policy v{version} has had no canary", field="version")
        zero = {"canary": 0, "control": 0}
        return {
            "version": row.version,
            "state": row.state,
            "fraction": row.fraction,
            "samples": dict(zero),
            "scores": {"canary": 0.0, "control": 0.0},
            "outcome_samples": dict(zero),
            "outcome_scores": {"canary": 0.0, "control": 0.0},
            "drain_samples": dict(zero),
            "drain_scores": {"canary": 0.0, "control": 0.0},
            "energy_samples": dict(zero),
            "energy_scores": {"canary": 0.0, "control": 0.0},
            "classes": [],
            "events": list(row.events),
            "nodes": list(row.nodes),
            "failure": "" if row.state != "canary" else "not running on this hub (it resumes at a start)",
        }

    async def resume(self) -> LiveCanary | None:
        """Go on with the canary the store says is running (a restart, or a standby that took
        over), if any; None when there is none."""
        async with self.registry.store.session() as session:
            rows = list(
                await session.scalars(select(PolicyCanaryRow).where(PolicyCanaryRow.state == "canary"))
            )
        if not rows:
            return None
        row = max(rows, key=lambda r: r.updated_at)  # one at a time; the newest if ever several
        canary = LiveCanary.resumed(
            row, registry=self.registry, hub=self.hub, wake=self.wake, clock=self.clock
        )
        self.canaries[row.version] = canary
        self._tasks[row.version] = asyncio.create_task(canary.run(), name=f"policy-canary-v{row.version}")
        log.warning(
            "policy v%d canary resumed at %.0f%% of nodes (step %d); its scores start afresh",
            row.version,
            100 * row.fraction,
            row.step + 1,
        )
        return canary

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            try:
                await task
            except asyncio.CancelledError:
                pass
