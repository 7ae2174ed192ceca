"""The cluster power manager: the same for every scheduler, it suspends idle nodes and wakes them.

It reads the fleet (power states, batteries), never the scheduler's profile: which nodes it
wakes and suspends first does not depend on which scheduler runs (:meth:`PowerManager.wake_order`).

Every tick it wakes one host-capable sleeping node per waiting replica not covered by nodes
already waking (what a cluster autoscaler does on pending pods), then keeps each pool's reserves
of free CPU and whole empty nodes, suspending idle nodes beyond them (see
:class:`~.presets.PowerManagerConfig`).

The CPU reserve is either a fixed share of each pool or, with ``forecast``, sized from a forecast
of the CPU that will be requested before a node woken now is ready
(:class:`~controlplane.predict.online.OnlineBinForecast` over the requests seen so far: what the
scheduler is told, never the arrival process): larger before the day's peak and once a burst has
begun, smaller through quiet hours, so nodes are awake before the work that needs them arrives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from edgeplane_contract.resources import ResourceRequest

from controlplane.predict.online import OnlineBinForecast
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.physics import FleetPhysics, SimNode, battery_pct, repower
from controlplane.sim.presets import PowerManagerConfig

__all__ = ["PowerManager"]


class PowerManager:
    """Suspends and wakes the fleet's nodes; ``wake`` starts a node waking (the engine times it)."""

    def __init__(
        self,
        config: PowerManagerConfig,
        nodes: list[SimNode],
        sched: Scheduler,
        physics: FleetPhysics,
        wake: Callable[[SimNode], None],
    ) -> None:
        self.config = config
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        self.sched = sched
        self.physics = physics
        self.wake = wake
        self.demand: OnlineBinForecast | None = None
        if config.forecast:
            self.demand = OnlineBinForecast(bin_s=config.forecast_bin_s, period_s=config.forecast_period_s)
        self.fleet_cpu = sum(n.cpu for n in nodes) or 1.0

    def observe_arrival(self, request: WorkloadRequest, now: float) -> None:
        """A workload was submitted: its requested CPU feeds the demand forecast (if any)."""
        if self.demand is not None:
            self.demand.observe(now, request.resources.cpu * request.replicas)

    def reserves(self, members: list[SimNode], now: float) -> tuple[float, int]:
        """A pool's reserve of free awake CPU and of awake, empty nodes."""
        cfg = self.config
        total = sum(n.cpu for n in members)
        if self.demand is None:
            return cfg.reserve_fraction * total, max(1, math.ceil(cfg.reserve_empty_fraction * len(members)))
        # The fleet's expected demand, shared by CPU capacity, until a node of this pool woken now
        # is ready: the next tick plus the pool's slowest wake (5 s for an edge board, 45 s for a
        # server), so a pool that wakes fast holds less awake.
        lead_s = cfg.tick_s + max((n.spec.wake_s for n in members), default=0.0)
        expected = self.demand.expected(now, lead_s) * cfg.forecast_margin * total / self.fleet_cpu
        reserve = max(cfg.forecast_floor_fraction * total, expected)
        return reserve, max(1, math.ceil(cfg.forecast_empty_fraction * len(members)))

    def can_host(self, node: SimNode, res: ResourceRequest) -> bool:
        """Whether the node could hold the request when empty (what waking it for the work needs)."""
        return (
            node.cpu >= res.cpu
            and node.mem >= res.memory
            and node.whole_gpus >= res.gpu
            and (not res.mig or node.mig_gpus > 0)
            and node.dpus >= res.dpu
        )

    def manage(self, now: float) -> None:
        """One tick: wake nodes for waiting work and low reserves, suspend idle nodes beyond them."""
        cfg = self.config
        pools: dict[str, list[SimNode]] = {}
        for node in self.nodes:
            pools.setdefault(node.group, []).append(node)
        # Wake for waiting work: one host-capable sleeping node per waiting replica not covered
        # by nodes already waking (what a cluster autoscaler does on pending pods).
        waking_free: dict[str, float] = {n.name: n.cpu for n in self.nodes if n.state == "waking"}
        wakes = 0
        wake_order = self.wake_order(self.nodes)  # waking changes states, not the order
        for entry in self.sched.queue.ordered():
            res = entry.request.resources
            for _ in entry.replicas:
                covered = next(
                    (
                        k
                        for k, free in waking_free.items()
                        if free >= res.cpu and self.can_host(self.by_name[k], res)
                    ),
                    None,
                )
                if covered is not None:
                    waking_free[covered] -= res.cpu
                    continue
                sleeper = next((n for n in wake_order if n.state == "sleep" and self.can_host(n, res)), None)
                if sleeper is None or wakes >= 20:
                    break
                self.wake(sleeper)
                wakes += 1
                waking_free[sleeper.name] = sleeper.cpu - res.cpu
        # Keep each pool's reserves (free CPU, whole empty nodes); suspend idle nodes beyond them.
        for members in pools.values():
            alive = [n for n in members if n.state != "dead"]
            reserve, empty_target = self.reserves(alive, now)
            free = sum(n.cpu - n.cpu_alloc for n in alive if n.state == "on")
            free += sum(n.cpu for n in alive if n.state == "waking")
            empty = sum(1 for n in alive if (n.state == "on" and not n.replicas) or n.state == "waking")
            if free < reserve or empty < empty_target:
                for n in self.wake_order(alive):
                    if free >= reserve and empty >= empty_target:
                        break
                    if n.state == "sleep":
                        self.wake(n)
                        free += n.cpu
                        empty += 1
                continue
            for n in self.wake_order(alive, suspend=True):
                if (
                    n.state == "on"
                    and not n.replicas
                    and now - n.idle_since >= cfg.sleep_after_s
                    and free - n.cpu >= reserve
                    and empty - 1 >= empty_target
                ):
                    self.physics.advance(n, now)
                    n.state = "sleep"
                    self.physics.record.sleeps += 1
                    repower(n)
                    self.sched.set_node_ready(n.name, False)
                    free -= n.cpu
                    empty -= 1

    def wake_order(self, nodes: list[SimNode], *, suspend: bool = False) -> list[SimNode]:
        """Nodes in the order the power manager wakes them (``suspend``: suspends them).

        The same for every scheduler: the manager is part of the fleet and reads the fleet's
        state, never the scheduler's profile. Nodes on mains come first in fleet order, then
        nodes running on battery by charge, fullest first; suspends go the other way round, so
        the reserve of awake, empty nodes is held by mains-powered nodes, not by a battery
        draining through the night. With no node on battery the order is the fleet order.
        """
        if not any(n.on_battery for n in nodes):
            return list(nodes)
        # Stable sorts: mains nodes (one key, past any charge) keep the fleet order, as do ties.
        if suspend:
            return sorted(nodes, key=lambda n: battery_pct(n) if n.on_battery else 101.0)
        return sorted(nodes, key=lambda n: -battery_pct(n) if n.on_battery else -101.0)
