"""Cold-start-aware routing of one invocation: a pure function of the hub's view.

For every node that may run the function, three ways to serve the invocation are priced:

* ``warm``: a warm instance has a free slot: network + execution;
* ``queue``: every instance of the version is busy: wait for one (about one execution) + execution;
* ``cold``: start a new instance: network + cold start (estimated per function and node) + execution.

The cost is the expected latency plus the energy term of the placement reward: ``w3`` times the
energy the choice spends (a cold start's initialisation plus the execution, in ms of work), with
``w3`` from the reward module's adaptive rule: raised on battery, more as the battery drains.
The cheapest option wins; ties go to the node with fewer invocations in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgeplane_contract.objective import RewardConfig, energy_weight

__all__ = ["EnergyWeights", "NodeOption", "Route", "RouteOption", "route"]

_MEMO_MAX = 1024


@dataclass(slots=True)
class EnergyWeights:
    """The energy weight w3 of the placement reward, per node, in routing units.

    ``w3`` comes from the reward module's adaptive rule (``energy_weight``: the configured w3 on
    mains, raised on battery and more as the battery drains); ``scale`` converts it to
    milliseconds of latency per millisecond of work spent, the router's unit.
    """

    reward: RewardConfig = field(default_factory=RewardConfig)
    scale: float = 0.05
    # w3 by (power source, battery level), for the (reward, scale) it was computed with: priced
    # per node on every invocation, it changes only with a node's telemetry.
    _memo: dict[tuple[str, float | None], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _memo_of: tuple[object, float] | None = field(default=None, init=False, repr=False, compare=False)

    def w3(self, power_source: str, battery_percent: float | None) -> float:
        key = (power_source, battery_percent)
        if self._memo_of is None or self._memo_of[0] is not self.reward or self._memo_of[1] != self.scale:
            self._memo.clear()
            self._memo_of = (self.reward, self.scale)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        on_battery = np.array([1.0 if power_source == "battery" else 0.0])
        level = np.array([np.nan if battery_percent is None else battery_percent])
        value = self.scale * float(energy_weight(self.reward, on_battery, level)[0])
        if len(self._memo) >= _MEMO_MAX:  # battery levels vary: bounded, refilled as used
            self._memo.clear()
        self._memo[key] = value
        return value


@dataclass(slots=True)
class NodeOption:
    node: str
    warm_free: int = 0
    # Slots of its instances, starting ones included, not taken by calls in flight (what a
    # spare's headroom counts; warm_free leaves starting instances out: they cannot serve yet).
    free_slots: int = 0
    busy_instances: int = 0
    can_start: bool = True
    net_ms: float = 2.0
    cold_ms: float = 300.0
    in_flight: int = 0
    power_source: str = "mains"
    battery_percent: float | None = None


@dataclass(slots=True)
class RouteOption:
    node: str
    mode: str
    expected_ms: float
    cost: float


@dataclass(slots=True)
class Route:
    node: str
    mode: str
    expected_ms: float
    alternatives: list[RouteOption] = field(default_factory=list)

    @property
    def allow_cold(self) -> bool:
        return self.mode != "queue"


def route(options: list[NodeOption], *, exec_ms: float, weights: EnergyWeights | None = None) -> Route | None:
    """The cheapest way to serve one invocation, or None when no node can."""
    weights = weights or EnergyWeights()
    priced: list[tuple[float, int, RouteOption]] = []
    for option in options:
        w3 = weights.w3(option.power_source, option.battery_percent)
        candidates: list[tuple[str, float, float]] = []
        if option.warm_free > 0:
            candidates.append(("warm", option.net_ms + exec_ms, exec_ms))
        if option.busy_instances > 0:
            candidates.append(("queue", option.net_ms + 2 * exec_ms, exec_ms))
        if option.can_start:
            candidates.append(("cold", option.net_ms + option.cold_ms + exec_ms, option.cold_ms + exec_ms))
        for mode, expected, energy in candidates:
            cost = expected + w3 * energy
            priced.append((cost, option.in_flight, RouteOption(option.node, mode, expected, cost)))
    if not priced:
        return None
    priced.sort(key=lambda item: (item[0], item[1], item[2].node))
    best = priced[0][2]
    return Route(
        node=best.node, mode=best.mode, expected_ms=best.expected_ms, alternatives=[p[2] for p in priced[1:4]]
    )
