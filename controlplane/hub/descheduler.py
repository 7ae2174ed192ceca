"""The descheduler: work that can move is moved off a node that has turned anomalous, within a
disruption budget (Kubernetes' descheduler, with its eviction limits and a PodDisruptionBudget's
``maxUnavailable`` per workload).

* **Anomalous** (:func:`node_anomaly`): on battery below ``battery_floor_percent`` (a battery
  collapsing under its work), or, when ``load_per_core_max`` is set, a run queue (1-minute load
  per CPU core) over it (sustained interference: more runnable work than cores), either of them
  for ``sustain_s`` without a break. A node that has been anomalous that long is **cordoned**
  (no new placements) until it is not any more.
* **Movable** (:func:`movable`): a workload whose spec allows it, restartable
  (``restart_policy`` on-failure or always) or a stateless replica (a ``service`` with more than
  one replica). Its placement is stopped with the reason; the replica goes back to Pending and
  is placed again, on another node (this one is cordoned).
* **Budget** (:class:`DisruptionBudget`): at most ``max_moves`` moves in any ``window_s``, and at
  most ``max_unavailable_per_workload`` replicas of one workload on their way at once. Work that
  the budget holds stays where it is and is looked at again at the next pass.

Every move is an event ``Descheduled`` on the workload (node, reason) and counted in /metrics.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from controlplane.fleet.nodes import NodeLive
from controlplane.hub.periodic import run_periodically
from controlplane.specs.workload import WorkloadSpec

__all__ = ["Descheduler", "DeschedulerSettings", "DisruptionBudget", "movable", "node_anomaly"]

log = logging.getLogger("edgeplane.hub.descheduler")


@dataclass(frozen=True, slots=True)
class DeschedulerSettings:
    enabled: bool = True
    every_s: float = 5.0
    sustain_s: float = 30.0
    battery_floor_percent: float = 15.0
    load_per_core_max: float | None = None  # None: CPU overload is not an anomaly (batch work fills cores)
    max_moves: int = 2
    window_s: float = 300.0
    max_unavailable_per_workload: int = 1

    def __post_init__(self) -> None:
        if self.every_s <= 0 or self.sustain_s < 0 or self.window_s <= 0:
            raise ValueError("every_s and window_s must be > 0, sustain_s >= 0")
        if self.max_moves < 0 or self.max_unavailable_per_workload < 1:
            raise ValueError("max_moves must be >= 0 and max_unavailable_per_workload >= 1")


def node_anomaly(live: NodeLive, settings: DeschedulerSettings, cores: float | None = None) -> str | None:
    """Why ``live`` (with ``cores`` CPU cores) is anomalous now, or None."""
    pct = live.battery_percent
    if live.power_source == "battery" and pct is not None and pct < settings.battery_floor_percent:
        return f"battery at {pct:.0f}% on battery power (floor {settings.battery_floor_percent:g}%)"
    limit = settings.load_per_core_max
    load = live.telemetry.get("load_1m")
    if limit is not None and isinstance(load, int | float) and isinstance(cores, int | float) and cores > 0:
        if load / cores > limit:
            return f"run queue {load / cores:.1f} per core (over {limit:g})"
    return None


def movable(spec: WorkloadSpec) -> bool:
    """Whether a replica of ``spec`` may be stopped and placed again elsewhere."""
    return spec.restart_policy in ("on-failure", "always") or (spec.kind == "service" and spec.replicas > 1)


class DisruptionBudget:
    """At most ``max_moves`` in any ``window_s``; at most ``per_workload`` of one workload's
    replicas moving at once (``moving``: those stopped and not yet ended)."""

    def __init__(self, max_moves: int, window_s: float, per_workload: int) -> None:
        self.max_moves = max_moves
        self.window_s = window_s
        self.per_workload = per_workload
        self._moves: deque[float] = deque()

    def left(self, now: float) -> int:
        while self._moves and now - self._moves[0] >= self.window_s:
            self._moves.popleft()
        return max(0, self.max_moves - len(self._moves))

    def allows(self, workload_id: str, now: float, moving: Mapping[str, int]) -> bool:
        return self.left(now) > 0 and moving.get(workload_id, 0) < self.per_workload

    def spend(self, now: float) -> None:
        self._moves.append(now)


class DeschedulerHub(Protocol):
    """What the descheduler needs of the hub."""

    @property
    def nodes(self) -> Mapping[str, NodeLive]: ...

    def placements_on(self, node: str) -> list[tuple[str, str, int]]:
        """(placement id, workload id, replica) of the placements active on ``node``."""
        ...

    def is_active(self, placement_id: str) -> bool: ...

    async def specs_of(self, workload_ids: list[str]) -> dict[str, WorkloadSpec]: ...

    async def move_placement(self, placement_id: str, reason: str) -> bool:
        """Stop it so that its replica is placed again; False when it is no longer active."""
        ...

    def cordon(self, node: str, cordoned: bool) -> None: ...

    def cores(self, node: str) -> float | None: ...


class Descheduler:
    def __init__(
        self,
        hub: DeschedulerHub,
        settings: DeschedulerSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hub = hub
        self.settings = settings
        self.clock = clock
        self.budget = DisruptionBudget(
            settings.max_moves, settings.window_s, settings.max_unavailable_per_workload
        )
        self._since: dict[str, float] = {}  # node -> anomalous since
        self.cordoned: set[str] = set()
        self._moving: dict[str, str] = {}  # placement id -> workload id, until it ends
        self.moves = 0
        self.held_by_budget = 0

    async def run(self) -> None:
        await run_periodically(self.pass_once, every_s=self.settings.every_s, what="descheduler", log=log)

    async def pass_once(self) -> list[str]:
        """Judge every node, cordon or uncordon, and move what the budget allows; the ids moved."""
        now = self.clock()
        self._moving = {p: w for p, w in self._moving.items() if self.hub.is_active(p)}
        due: list[tuple[str, str]] = []  # (node, reason), anomalous for sustain_s
        for name, live in list(self.hub.nodes.items()):
            ready = live.status == "Ready"
            reason = node_anomaly(live, self.settings, self.hub.cores(name)) if ready else None
            if reason is None:
                self._since.pop(name, None)
                if name in self.cordoned:
                    self.cordoned.discard(name)
                    self.hub.cordon(name, False)
                    log.info("node %s is no longer anomalous: uncordoned", name)
                continue
            since = self._since.setdefault(name, now)
            if now - since >= self.settings.sustain_s:
                due.append((name, reason))
        moved: list[str] = []
        for name, reason in due:
            if name not in self.cordoned:
                self.cordoned.add(name)
                self.hub.cordon(name, True)
                log.warning("node %s anomalous (%s): cordoned", name, reason)
            moved += await self._move_from(name, reason, now)
        return moved

    async def _move_from(self, node: str, reason: str, now: float) -> list[str]:
        placements = [p for p in self.hub.placements_on(node) if p[0] not in self._moving]
        if not placements:
            return []
        specs = await self.hub.specs_of(sorted({w for _, w, _ in placements}))
        moved: list[str] = []
        for placement_id, workload_id, replica in placements:
            spec = specs.get(workload_id)
            if spec is None or not movable(spec):
                continue
            moving: dict[str, int] = {}
            for w in self._moving.values():
                moving[w] = moving.get(w, 0) + 1
            if not self.budget.allows(workload_id, now, moving):
                self.held_by_budget += 1
                continue
            if await self.hub.move_placement(placement_id, f"descheduled: node {node} {reason}"):
                self.budget.spend(now)
                self._moving[placement_id] = workload_id
                self.moves += 1
                moved.append(placement_id)
                log.info("moved replica %d of %s off %s (%s)", replica, workload_id, node, reason)
        return moved
