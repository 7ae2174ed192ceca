"""Energy per workload: each node's reported draw, integrated between heartbeats and shared among
the placements running there.

Agents report a power figure with each heartbeat (``Telemetry.power_w``) and how they got it
(``power_method``: ``battery`` the battery's own discharge reading, ``rapl`` the CPU packages'
energy counters plus the GPUs' NVML readings, ``model`` the node type's power model at the
measured CPU use). Between two heartbeats a node used the trapezoid of the two readings times the
time between them (a gap longer than ``max_gap_s`` is counted as ``max_gap_s``: lost heartbeats
are not guessed). That energy is shared among the placements the later heartbeat lists as
running, in proportion to their CPU requests: the whole draw, idle included, since the node is
on for them (a node that packs more work gives each a smaller share). Each placement's joules and
requested vCPU-seconds add up until it ends (:meth:`EnergyMeter.ended`).

Pure bookkeeping: no clock of its own, no I/O; the hub calls it from the heartbeat handler.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EnergyMeter", "PlacementEnergy"]


@dataclass(slots=True)
class PlacementEnergy:
    """What a placement used: joules and the vCPU-seconds it held while they were counted."""

    joules: float = 0.0
    vcpu_s: float = 0.0
    method: str = ""

    @property
    def watts_per_vcpu(self) -> float | None:
        """The mean draw per requested vCPU while it ran (None when nothing was counted)."""
        return self.joules / self.vcpu_s if self.vcpu_s > 0 else None


class EnergyMeter:
    """Per node: the last reading; per placement: its share so far; per node and method: the total."""

    def __init__(self, *, max_gap_s: float = 30.0) -> None:
        self.max_gap_s = max_gap_s
        self._last: dict[str, tuple[float, float]] = {}  # node -> (wall time, watts)
        self._placements: dict[str, PlacementEnergy] = {}
        self.node_joules: defaultdict[tuple[str, str], float] = defaultdict(float)  # (node, method) -> J

    def heard(
        self, node: str, t: float, watts: float | None, method: str, running: Iterable[tuple[str, float]]
    ) -> None:
        """A heartbeat of ``node`` at wall time ``t`` with its draw; ``running``: (placement id,
        CPU request) of the placements it runs that the hub knows as active."""
        if watts is None or not (math.isfinite(watts) and watts >= 0.0):
            self._last.pop(node, None)  # no reading: the next interval is not counted
            return
        previous = self._last.get(node)
        self._last[node] = (t, watts)
        if previous is None or t <= previous[0]:
            return
        dt = min(t - previous[0], self.max_gap_s)
        joules = 0.5 * (previous[1] + watts) * dt
        self.node_joules[(node, method or "unknown")] += joules
        shares = [(pid, max(cpu, 0.0)) for pid, cpu in running]
        total_cpu = sum(cpu for _, cpu in shares)
        for pid, cpu in shares:
            used = self._placements.get(pid)
            if used is None:
                used = self._placements[pid] = PlacementEnergy(method=method)
            # No CPU request anywhere (all zero): an even share each.
            weight = cpu / total_cpu if total_cpu > 0 else 1.0 / len(shares)
            used.joules += joules * weight
            used.vcpu_s += cpu * dt
            if used.method != method:
                used.method = "mixed"

    def ended(self, placement_id: str) -> PlacementEnergy | None:
        """A placement ended: what it used (None when no heartbeat counted it), forgotten here."""
        return self._placements.pop(placement_id, None)

    def node_lost(self, node: str) -> None:
        """No interval across a node's silence."""
        self._last.pop(node, None)

    def __len__(self) -> int:
        return len(self._placements)
