"""The raw outcome of one simulation run (a leaf: the engine, its physics and the metrics share it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunRecord"]


@dataclass(slots=True)
class RunRecord:
    """Raw outcome of one run, turned into the reported metrics by :mod:`.metrics`."""

    scheduler: str
    window_s: float
    nodes: int
    total_gpus: int
    energy_j: float
    used_cpu_t: float
    used_mem_t: float
    cap_cpu_t: float
    cap_mem_t: float
    fleet_cpu_t: float
    fleet_mem_t: float
    gpu_t: float
    tasks: list[dict[str, Any]] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    decision_time_s: float = 0.0
    pending_time_s: float = 0.0
    pending_calls: int = 0
    preemptions: int = 0
    merges: int = 0
    sleeps: int = 0
    wakes: int = 0
    battery_deaths: int = 0
    battery_nodes: int = 0
    depleted_batteries: int = 0
    min_battery_pct: float | None = None
    battery_drawn_wh: float = 0.0
    unfinished: int = 0
    wall_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    # The fair score sheet (metrics.py): work served (request CPU x nominal solo runtime, not
    # the stretched occupancy) in the window, the work the measured arrivals offered, and
    # whether the power manager ran.
    served_cpu_t: float = 0.0
    offered_cpu_t: float = 0.0
    power_manager: bool = True
