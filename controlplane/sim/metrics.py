"""From a run's end state to its raw record, and from the record to the reported metrics (one
definition for every scheduler).

* ``mean_utilization``: requested CPU and memory over the capacity of powered-on nodes,
  time-averaged over the measured window, mean of the two (``cpu_utilization`` and
  ``memory_utilization`` separately; ``mean_utilization_all_nodes`` over the whole fleet).
* ``p99_task_latency_s``: 99th percentile of (queueing + running) over measured tasks that
  completed (tasks that gave up are counted in ``dropped_rate`` and as SLA violations).
* ``sla_violation_rate``: share of measured tasks with an SLA that finished late, gave up or did
  not finish by the end of the drain.
* ``mean_power_w``: energy over the window / (window * nodes), sleeping nodes included.
* ``gpu_utilization``: GPU compute in use (whole GPUs, MIG slices as 1/7) over all GPUs.
* ``large_gpu_schedulability``: share of large-GPU-memory tasks started within their patience.
* ``decisions_per_s`` / ``p99_decision_latency_ms``: wall-clock of ``Scheduler.schedule`` calls
  (arrivals and resubmissions), explanations included.
* ``battery_energy_kwh``: energy drawn from the batteries of solar + battery nodes over the whole
  run (warm-up and drain included; charging not subtracted); ``depleted_batteries``: how many of
  them ran flat at least once (``battery_deaths`` counts every time); ``battery_nodes``.

The fair score sheet (issue 13), beside the figures above, which stay as they were:

* ``served_utilization``: work served in the window (each finished replica's request CPU x its
  nominal solo runtime, spread evenly over its final run where the run crosses a window edge;
  replicas still running when the simulation stops count their in-window time at their current
  rate) over the CPU capacity of the whole fleet; ``served_utilization_powered_on`` over the
  capacity of powered-on nodes. Stretched occupancy (a slowed task holding its request longer)
  and work thrown away by restarts do not count, so it is never above ``cpu_utilization_all_nodes``
  / ``cpu_utilization`` (the stretched occupancy, CPU only). ``offered_utilization``: the work of
  the measured arrivals (request CPU x nominal runtime x replicas) over the fleet's capacity.
* ``energy_kwh``: the fleet's energy over the window (``mean_power_w`` x nodes x hours);
  ``energy_per_served_cpu_hour_wh``: that energy over the work served in the window (Wh per
  vCPU-hour of ``served_utilization``'s work): where schedulers serve different amounts of the
  same offered work in the window, energy alone favours the one that served less.
* ``power_manager``: whether the power manager ran.
* ``p50_queue_s`` / ``p99_queue_s``: arrival to full start, over measured tasks that started.
* ``by_class`` and ``by_kind`` (service, batch, analytics, function): tasks, SLA violation rate
  (with ``sla_tasks`` and ``sla_violations``), latency and queueing percentiles, stretch, drops.

MIG fragmentation (issue 13; ``large_gpu_schedulability`` above is the headline):

* ``large_gpu_started_at_arrival``: share of large-GPU tasks placed at once (no queueing).
* ``large_gpu_mig_arrivals``: measured large-GPU tasks asking for one MIG instance;
  ``large_gpu_fragmented_arrivals``: how many of them arrived when no MIG GPU had a legal position
  free for it although the fleet's free slices in total would hold it (:mod:`.migfit`);
  ``large_gpu_schedulability_fragmented``: the share of those started within their patience
  (None when there were none).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from controlplane.sim.migfit import FRAGMENTED
from controlplane.sim.physics import SimNode, SimReplica, SimTask
from controlplane.sim.record import RunRecord

__all__ = ["HEADLINE_KEYS", "credit_running", "credit_served", "record_outcomes", "summarise"]

HEADLINE_KEYS = (
    "mean_utilization",
    "p99_task_latency_s",
    "sla_violation_rate",
    "mean_power_w",
    "gpu_utilization",
    "large_gpu_schedulability",
    "decisions_per_s",
    "p99_decision_latency_ms",
)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 0.0


def _p(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _groups(tasks: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """Per-class (``key`` "cls") or per-kind ("kind") figures, sorted by name."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tasks:
        groups[t[key]].append(t)
    out: dict[str, dict[str, Any]] = {}
    for name, items in sorted(groups.items()):
        lat = [t["latency_s"] for t in items if t["latency_s"] is not None]
        sla_items = [t for t in items if t["sla_s"] is not None]
        queue = [t["queue_s"] for t in items if t["queue_s"] is not None]
        stretch = [t["stretch"] for t in items if t.get("stretch") is not None]
        violations = sum(t["violated"] for t in sla_items)
        out[name] = {
            "tasks": len(items),
            "sla_violation_rate": _ratio(violations, len(sla_items)),
            "p50_latency_s": _p(lat, 50),
            "p99_latency_s": _p(lat, 99),
            "mean_queue_s": float(np.mean(queue)) if queue else None,
            # (end - start) / nominal runtime: contention, remote data, restarts stretch it.
            "mean_stretch": float(np.mean(stretch)) if stretch else None,
            "dropped": sum(t["dropped"] for t in items),
            "p50_queue_s": _p(queue, 50),
            "p99_queue_s": _p(queue, 99),
            "sla_tasks": len(sla_items),
            "sla_violations": int(violations),
        }
    return out


def summarise(rec: RunRecord) -> dict[str, Any]:
    """The headline metrics plus extras, JSON-able."""
    tasks = rec.tasks
    latencies = [t["latency_s"] for t in tasks if t["latency_s"] is not None]
    queues = [t["queue_s"] for t in tasks if t["queue_s"] is not None]
    with_sla = [t for t in tasks if t["sla_s"] is not None]
    large = [t for t in tasks if t["large_gpu"]]
    cpu_u = _ratio(rec.used_cpu_t, rec.cap_cpu_t)
    mem_u = _ratio(rec.used_mem_t, rec.cap_mem_t)
    return {
        "mean_utilization": (cpu_u + mem_u) / 2,
        "p99_task_latency_s": _p(latencies, 99) or 0.0,
        "sla_violation_rate": _ratio(sum(t["violated"] for t in with_sla), len(with_sla)),
        "mean_power_w": _ratio(rec.energy_j, rec.window_s * rec.nodes),
        "gpu_utilization": _ratio(rec.gpu_t, rec.total_gpus * rec.window_s),
        "large_gpu_schedulability": _ratio(sum(t["started_in_time"] for t in large), len(large))
        if large
        else 1.0,
        "decisions_per_s": _ratio(len(rec.decision_ms), rec.decision_time_s),
        "p99_decision_latency_ms": _p(rec.decision_ms, 99) or 0.0,
        "cpu_utilization": cpu_u,
        "memory_utilization": mem_u,
        "mean_utilization_all_nodes": (
            _ratio(rec.used_cpu_t, rec.fleet_cpu_t) + _ratio(rec.used_mem_t, rec.fleet_mem_t)
        )
        / 2,
        "p50_task_latency_s": _p(latencies, 50) or 0.0,
        "p50_decision_latency_ms": _p(rec.decision_ms, 50) or 0.0,
        "decisions": len(rec.decision_ms),
        "tasks": len(tasks),
        "dropped_rate": _ratio(sum(t["dropped"] for t in tasks), len(tasks)),
        "unfinished_tasks": rec.unfinished,
        "preemptions": rec.preemptions,
        "fragment_merges": rec.merges,
        "node_sleeps": rec.sleeps,
        "node_wakes": rec.wakes,
        "battery_energy_kwh": rec.battery_drawn_wh / 1000.0,
        "depleted_batteries": rec.depleted_batteries,
        "battery_nodes": rec.battery_nodes,
        "battery_deaths": rec.battery_deaths,
        "min_battery_percent": rec.min_battery_pct,
        "battery_drawn_wh": rec.battery_drawn_wh,
        "pending_retry_time_s": rec.pending_time_s,
        "wall_s": rec.wall_s,
        "by_class": _groups(tasks, "cls"),
        # The fair score sheet (module docstring).
        "power_manager": rec.power_manager,
        "served_utilization": _ratio(rec.served_cpu_t, rec.fleet_cpu_t),
        "served_utilization_powered_on": _ratio(rec.served_cpu_t, rec.cap_cpu_t),
        "cpu_utilization_all_nodes": _ratio(rec.used_cpu_t, rec.fleet_cpu_t),
        "offered_utilization": _ratio(rec.offered_cpu_t, rec.fleet_cpu_t),
        "energy_kwh": rec.energy_j / 3.6e6,
        # J per vCPU-second is Wh per vCPU-hour.
        "energy_per_served_cpu_hour_wh": _ratio(rec.energy_j, rec.served_cpu_t),
        "p50_queue_s": _p(queues, 50),
        "p99_queue_s": _p(queues, 99),
        "by_kind": _groups(tasks, "kind"),
        **_large_mig(large),
    }


def _large_mig(large: list[dict[str, Any]]) -> dict[str, Any]:
    """The MIG fragmentation figures of large-GPU tasks (module docstring, issue 13)."""
    classed = [t for t in large if t.get("arrival_fit") is not None]
    fragmented = [t for t in classed if t["arrival_fit"] == FRAGMENTED]
    return {
        "large_gpu_started_at_arrival": _ratio(sum(t["queue_s"] == 0.0 for t in large), len(large))
        if large
        else 1.0,
        "large_gpu_mig_arrivals": len(classed),
        "large_gpu_fragmented_arrivals": len(fragmented),
        "large_gpu_schedulability_fragmented": _ratio(
            sum(t["started_in_time"] for t in fragmented), len(fragmented)
        )
        if fragmented
        else None,
    }


def record_outcomes(
    rec: RunRecord, nodes: list[SimNode], tasks: list[SimTask], stats: dict[str, int], wall_s: float
) -> None:
    """Fill in what a run's record takes from the end state: batteries, and one entry per
    measured task (latency, SLA, queueing, stretch) in arrival order."""
    rec.wall_s = wall_s
    rec.stats = dict(stats)
    batteries = [n for n in nodes if n.has_battery]
    rec.battery_nodes = len(batteries)
    rec.depleted_batteries = sum(1 for n in batteries if n.dead_events > 0)
    if batteries:
        rec.min_battery_pct = min(n.min_battery_pct for n in batteries)
        rec.battery_drawn_wh = sum(n.battery_drawn_wh for n in batteries)
    for task in tasks:
        spec = task.spec
        if not spec.measured:
            continue
        rec.offered_cpu_t += spec.request.resources.cpu * spec.runtime_s * spec.request.replicas
        latency = task.done_at - spec.arrival_s if task.done_at is not None else None
        if not task.resolved:
            rec.unfinished += 1
        violated = spec.sla_s is not None and (task.dropped or latency is None or latency > spec.sla_s)
        started_in_time = task.full_start is not None and (
            spec.patience_s is None or task.full_start - spec.arrival_s <= spec.patience_s + 1e-9
        )
        rec.tasks.append(
            {
                "cls": spec.cls,
                "kind": spec.kind,
                "arrival_s": spec.arrival_s,
                "latency_s": latency,
                "sla_s": spec.sla_s,
                "violated": violated,
                "dropped": task.dropped,
                "large_gpu": spec.large_gpu,
                "started_in_time": started_in_time,
                "queue_s": (task.full_start - spec.arrival_s) if task.full_start is not None else None,
                "stretch": (task.done_at - task.full_start) / spec.runtime_s
                if task.done_at is not None and task.full_start is not None and spec.runtime_s > 0
                else None,
                "restarts": task.restarts,
                "arrival_fit": task.arrival_fit,
            }
        )


def _overlap(start: float, end: float, window: tuple[float, float]) -> float:
    return max(0.0, min(end, window[1]) - max(start, window[0]))


def credit_served(rec: RunRecord, rep: SimReplica, end: float, window: tuple[float, float]) -> None:
    """A replica finished at ``end``: credit its work (request CPU x nominal runtime) to the
    window, pro rata of its final run's time inside it (rate changes within a run are not
    tracked; a run inside the window is credited whole)."""
    spec = rep.task.spec
    duration = end - rep.started
    inside = _overlap(rep.started, end, window)
    if duration > 0 and inside > 0:
        rec.served_cpu_t += spec.request.resources.cpu * spec.runtime_s * inside / duration


def credit_running(rec: RunRecord, nodes: list[SimNode], now: float, window: tuple[float, float]) -> None:
    """Replicas still running when the run stops: their in-window time at their current rate
    (nominal seconds of progress), at most their nominal runtime."""
    for node in nodes:
        for rep in node.replicas.values():
            spec = rep.task.spec
            progress = min(spec.runtime_s, _overlap(rep.started, now, window) * rep.rate)
            rec.served_cpu_t += spec.request.resources.cpu * progress
