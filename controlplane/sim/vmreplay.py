"""Replay the Azure VM trace (:mod:`.vmtrace`) through the simulator, schedulers side by side.

Mapping (docs/bench-scheduling.md, "Azure VM trace"):

* **One VM, one request** (one replica, kind ``service``, priority 0, no SLA latency). A tenant
  batch's VMs arrive together (one seeded instant in their 5-minute bin) but are separate
  requests: a batch may mix flavors and lifetimes, the simulator's replicas share one size and
  one runtime, and Azure allocates a deployment's VMs one by one. The batch is the request's
  ``name`` (``tenant-batch-N``).
* **Size**: the flavor's vCPUs and memory (``flav_map.txt``). **Lifetime**: drawn uniformly
  (seeded, per VM) over its duration bin's span; a censored VM runs until the censoring time,
  which no replay passes, so it never leaves. The scheduler is not told lifetimes.
* **Acceptance**: a request not started within :data:`VM_PATIENCE_S` is rejected (gives up).
  There is no SLA latency: a VM's lifetime is its tenant's, so the queueing delay is the
  figure of merit, and the contention model is off (``amplitude`` 0) so that a VM's lifetime is
  never stretched and served utilisation is the work offered and placed.
* **Fleet**: homogeneous 64-vCPU, 256 GB hosts (the ``cpu`` power model), racks of 10; by
  default as many as put the peak offered CPU at :data:`TARGET_PEAK` of the fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import WorkloadRequest
from controlplane.sim.engine import Simulation
from controlplane.sim.metrics import summarise
from controlplane.sim.physics import SimTask
from controlplane.sim.presets import GB, ContentionModel, NodeGroup, Preset
from controlplane.sim.report import format_cell
from controlplane.sim.runner import SCHEDULERS, check_power_manager, power_manager_runs
from controlplane.sim.vmtrace import BIN_S, VmTrace
from controlplane.sim.workload import TaskSpec

__all__ = [
    "CREDIT",
    "HOST_CPU",
    "HOST_MEMORY_GB",
    "TARGET_PEAK",
    "VM_PATIENCE_S",
    "VmSimulation",
    "format_trace_table",
    "offered_cpu",
    "run_trace_comparison",
    "size_fleet",
    "vm_preset",
    "vm_tasks",
]

CREDIT = (
    'Azure Public Dataset V1 VM trace (Cortez et al., "Resource Central", SOSP 2017), CC-BY 4.0; '
    "binned by huaweicloud/trace_generation_rnn (MIT)"
)
HOST_CPU = 64.0
HOST_MEMORY_GB = 256.0
#: Seconds a VM request waits for room before it is rejected (two trace bins; a wake takes <1 min).
VM_PATIENCE_S = 600.0
#: Default fleet size: the peak offered CPU is this share of the fleet's.
TARGET_PEAK = 0.8


def vm_tasks(trace: VmTrace, seed: int) -> list[TaskSpec]:
    """One task per VM, sorted by arrival. Draws follow trace order, so a shorter replay of the
    same split and seed is a prefix of a longer one."""
    rng = np.random.default_rng([seed, 13])
    tasks: list[TaskSpec] = []
    batch = -1
    at = 0.0
    for i, vm in enumerate(trace.vms):
        if vm.batch != batch:
            batch = vm.batch
            at = (vm.bin + float(rng.random())) * BIN_S
        low, high = trace.lifetime_range(vm)
        lifetime = low + (high - low) * float(rng.random()) if math.isfinite(high) else low
        task_id = f"vm-{i}"
        request = WorkloadRequest(
            id=task_id,
            name=f"tenant-batch-{vm.batch}",
            resources=ResourceRequest(cpu=vm.flavor.vcpus, memory=int(vm.flavor.memory_gb * GB)),
            kind="service",
        )
        tasks.append(
            TaskSpec(
                id=task_id,
                cls=f"vm-{vm.flavor.vcpus:g}c-{vm.flavor.memory_gb:g}g",
                kind="service",
                arrival_s=at,
                request=request,
                runtime_s=max(lifetime, 1.0),
                sla_s=None,
                patience_s=VM_PATIENCE_S,
                large_gpu=False,
                data_node_index=None,
                measured=True,
            )
        )
    tasks.sort(key=lambda t: t.arrival_s)  # stable: a batch keeps its order
    return tasks


def offered_cpu(tasks: list[TaskSpec], horizon_s: float, step_s: float = BIN_S) -> tuple[float, float]:
    """(vCPU-seconds offered in ``[0, horizon_s)``, peak concurrent vCPUs sampled every ``step_s``)
    if every VM started on arrival."""
    if not tasks:
        return 0.0, 0.0
    start = np.array([t.arrival_s for t in tasks])
    end = np.minimum(start + np.array([t.runtime_s for t in tasks]), horizon_s)
    cpu = np.array([t.request.resources.cpu for t in tasks])
    work = float(np.sum(cpu * np.clip(end - start, 0.0, None)))
    grid = np.arange(0.0, horizon_s, step_s)
    delta = np.zeros(len(grid) + 1)
    np.add.at(delta, np.searchsorted(grid, start, side="right"), cpu)
    np.add.at(delta, np.searchsorted(grid, end, side="right"), -cpu)
    peak = float(np.max(np.cumsum(delta)[:-1])) if len(grid) else 0.0
    return work, peak


def size_fleet(peak_cpu: float, target: float = TARGET_PEAK) -> int:
    """Hosts that put ``peak_cpu`` at ``target`` of the fleet's CPU."""
    return max(1, math.ceil(peak_cpu / (HOST_CPU * target)))


def vm_preset(nodes: int) -> Preset:
    """The fleet as a preset: hosts only, no synthetic classes, no warm-up or drain (every VM
    of the replay is measured; the replay stops at its last bin)."""
    return Preset(
        name="azure-vm",
        description=f"{nodes} hosts ({HOST_CPU:g} vCPU, {HOST_MEMORY_GB:g} GB) replaying the Azure VM trace",
        groups=(NodeGroup("host", nodes, "cpu", HOST_CPU, HOST_MEMORY_GB),),
        classes=(),
        warmup_s=0.0,
        drain_s=0.0,
        contention=ContentionModel(amplitude=0.0, io_penalty=0.0),
    )


class VmSimulation(Simulation):
    """The simulation, sorting each arrival by where it could go before it is scheduled:

    * an awake node has room: placeable now;
    * ``wake_needed``: no awake node has room, a suspended (or waking) one, empty, would;
    * ``fragmented``: no node has room, but the fleet's free capacity in total would do;
    * ``no_room``: not even in total.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake_needed = 0
        self.fragmented = 0
        self.no_room = 0

    def _on_arrive(self, task: SimTask) -> None:
        res = task.spec.request.resources
        cpu_need, mem_need = res.cpu - 1e-9, float(res.memory)
        free_cpu = free_mem = 0.0
        awake = asleep = False
        for node in self.nodes:
            if node.state == "dead":
                continue
            # The power manager suspends only empty nodes: a sleeping node's room is all of it.
            cpu, mem = node.cpu - node.cpu_alloc, node.mem - node.mem_alloc
            free_cpu += cpu
            free_mem += mem
            if cpu >= cpu_need and mem >= mem_need:
                if node.state == "on":
                    awake = True
                    break
                asleep = True
        if not awake:
            if asleep:
                self.wake_needed += 1
            elif free_cpu >= cpu_need and free_mem >= mem_need:
                self.fragmented += 1
            else:
                self.no_room += 1
        super()._on_arrive(task)


def _vm_metrics(sim: VmSimulation, base: dict[str, Any], offered_cpu_s: float) -> dict[str, Any]:
    rec = sim.record
    tasks = rec.tasks
    n = len(tasks)
    accepted = [t for t in tasks if t["started_in_time"]]
    queue = [t["queue_s"] for t in accepted]
    host_cpu = rec.fleet_cpu_t / rec.window_s / rec.nodes if rec.window_s and rec.nodes else 1.0
    return {
        "vms": n,
        "acceptance_rate": len(accepted) / n if n else 1.0,
        "rejected": n - len(accepted),
        "queued_rate": sum(1 for q in queue if q > 0) / n if n else 0.0,
        "mean_queue_s": float(np.mean(queue)) if queue else 0.0,
        "p99_queue_s": float(np.percentile(queue, 99)) if queue else 0.0,
        "max_queue_s": float(np.max(queue)) if queue else 0.0,
        # Served work over the whole fleet: with contention off, requested vCPU-seconds placed.
        "served_cpu_utilization": rec.used_cpu_t / rec.fleet_cpu_t if rec.fleet_cpu_t else 0.0,
        "served_memory_utilization": rec.used_mem_t / rec.fleet_mem_t if rec.fleet_mem_t else 0.0,
        "offered_cpu_load": offered_cpu_s / rec.fleet_cpu_t if rec.fleet_cpu_t else 0.0,
        "served_of_offered": rec.used_cpu_t / offered_cpu_s if offered_cpu_s else 1.0,
        "cpu_utilization_powered": base["cpu_utilization"],
        "mean_nodes_powered": rec.cap_cpu_t / rec.window_s / host_cpu if rec.window_s else 0.0,
        "nodes_powered_at_end": sum(1 for node in sim.nodes if node.state in ("on", "waking")),
        "energy_kwh": rec.energy_j / 3.6e6,
        "fragmented_arrivals": sim.fragmented,
        "fragmentation_rate": sim.fragmented / n if n else 0.0,
        "no_room_arrivals": sim.no_room,
        "wake_needed_arrivals": sim.wake_needed,
    }


def run_trace_comparison(
    trace: VmTrace,
    *,
    schedulers: list[str],
    seed: int,
    nodes: int | None = None,
    progress: Callable[[str, float, tuple[float, float]], None] | None = None,
    power_manager: str | None = None,
) -> dict[str, Any]:
    """Simulate each scheduler on the same VM arrivals; returns the JSON report (the simulator's
    metrics per run plus the VM ones of :func:`_vm_metrics`). ``power_manager``: on, off or
    both (``NAME`` without it, ``NAME+pm`` with it), as in the presets' runs; None: on."""
    check_power_manager(power_manager)
    tasks = vm_tasks(trace, seed)
    horizon = trace.bins * BIN_S
    offered_s, peak = offered_cpu(tasks, horizon)
    fleet = nodes if nodes is not None else size_fleet(peak)
    preset = vm_preset(fleet)
    hours = horizon / 3600.0
    results: dict[str, Any] = {}
    for run_name, name, run_preset in power_manager_runs(schedulers, power_manager, preset):
        profile = SCHEDULERS[name]
        sim = VmSimulation(
            run_preset,
            tasks,
            scheduler_name=run_name,
            profile=dict(profile) if isinstance(profile, Mapping) else profile,
            hours=hours,
            seed=seed,
            progress=progress,
        )
        base = summarise(sim.run())
        results[run_name] = {
            **base,
            **_vm_metrics(sim, base, offered_s),
            "power_manager": "on" if run_preset.power_manager.enabled else "off",
        }
    return {
        "runs": results,
        "schedulers": results,
        "preset": preset.name,
        "trace": {
            "kind": "azure-vm",
            "dir": str(trace.directory),
            "split": trace.split,
            "bins": trace.bins,
            "vms": len(trace.vms),
            "batches": trace.batches,
            "censored": trace.censored,
            "credit": CREDIT,
        },
        "seed": seed,
        "power_manager": power_manager or "on",
        "hours": hours,
        "nodes": fleet,
        "peak_offered_cpu": peak,
        "peak_offered_fraction": peak / (fleet * HOST_CPU),
        "vm_patience_s": VM_PATIENCE_S,
        "tasks_generated": len(tasks),
        "tasks_measured": len(tasks),
    }


_ROWS = (
    ("acceptance_rate", "acceptance (started in 10 min)", "pct2"),
    ("queued_rate", "VMs that queued", "pct2"),
    ("mean_queue_s", "mean queueing delay (s)", "num"),
    ("p99_queue_s", "P99 queueing delay (s)", "num"),
    ("fragmentation_rate", "fragmented at arrival", "pct2"),
    ("no_room_arrivals", "arrivals with no room in total", "count"),
    ("wake_needed_arrivals", "arrivals that need a wake", "count"),
    ("served_cpu_utilization", "served CPU / fleet CPU", "pct2"),
    ("served_of_offered", "served / offered CPU work", "pct2"),
    ("cpu_utilization_powered", "CPU allocated, powered-on", "pct2"),
    ("mean_nodes_powered", "mean nodes powered", "num"),
    ("nodes_powered_at_end", "nodes powered at the end", "count"),
    ("energy_kwh", "energy (kWh)", "num"),
    ("p99_decision_latency_ms", "p99 decision latency (ms)", "num"),
)


def format_trace_table(report: dict[str, Any]) -> str:
    """The VM placement table, one column per scheduler."""
    runs = report["runs"]
    names = list(runs)
    width = max(12, *(len(n) + 2 for n in names))
    trace = report["trace"]
    lines = [
        f"azure-vm split {trace['split']}  {report['hours']:g} h  {report['tasks_measured']:,} VMs "
        f"({trace['batches']:,} tenant batches, {trace['censored']:,} censored)  seed {report['seed']}",
        f"{report['nodes']} hosts of {HOST_CPU:g} vCPU / {HOST_MEMORY_GB:g} GB; peak offered CPU "
        f"{report['peak_offered_cpu']:,.0f} vCPU = {100 * report['peak_offered_fraction']:.0f}% of the "
        f"fleet; offered CPU work {100 * runs[names[0]]['offered_cpu_load']:.1f}% of the fleet's",
        f"{'metric':32}" + "".join(f"{n:>{width}}" for n in names),
    ]
    for key, label, kind in _ROWS:
        lines.append(f"{label:32}" + "".join(f"{format_cell(runs[n][key], kind):>{width}}" for n in names))
    lines.append(f"trace: {CREDIT}")
    return "\n".join(lines)
