"""Decision latency of ``Scheduler.schedule`` on a large fleet (a command, not a test).

Builds the seed-200 fleet scaled to ``--nodes``, loads it to a steady state with the preset's
workload mix (placing arrivals, releasing them after their runtime in arrival order), then times
``--decisions`` schedule() calls per profile, explanations included, and prints p50/p99/max per
call (a workload of 4 replicas is one call: 4 cycles), p99 per replica, and p99 of the calling
thread's CPU time (immune to other processes competing for the cores).

    python bench/scheduler_latency.py --nodes 1000 --profiles default,binpack,edgeplane
    python bench/scheduler_latency.py --nodes 1000 --profiles edgeplane --metrics   # with /metrics' recording
"""

from __future__ import annotations

import argparse
import heapq
import json
import time

import numpy as np
from prometheus_client import CollectorRegistry

from controlplane.observe.scheduler import SchedulerMetrics
from controlplane.scheduling.model import GpuDevice, NodeState
from controlplane.scheduling.nodetable import ZONE_LABEL
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.presets import GB, get_preset, scale_preset
from controlplane.sim.runner import _data_nodes
from controlplane.sim.workload import generate_tasks


def build(profile: str, nodes: int, seed: int, metrics: bool = False) -> tuple[Scheduler, list]:
    preset = scale_preset(get_preset("seed-200"), nodes)
    clock = [0.0]
    # --metrics: the hub's Prometheus recorder (attempts, extension points, sampled plugins).
    recorder = SchedulerMetrics(CollectorRegistry()) if metrics else None
    sched = Scheduler(profile, seed=seed, clock=lambda: clock[0], recorder=recorder)
    for group in preset.groups:
        for k in range(group.count):
            sched.upsert_node(
                NodeState(
                    name=f"{group.prefix}-{k:03d}",
                    labels={ZONE_LABEL: f"{group.prefix}-r{k // group.rack_size}"},
                    cpu=group.cpu,
                    memory=int(group.memory_gb * GB),
                    gpus=[GpuDevice(i, mig_enabled=i < group.mig_gpus) for i in range(group.gpus)],
                    dpus=group.dpus,
                    node_type=group.node_type,
                )
            )
    tasks = generate_tasks(preset, 1.0, seed, data_nodes=_data_nodes(preset))
    return sched, tasks


def run(profile: str, nodes: int, decisions: int, seed: int, metrics: bool = False) -> dict[str, float]:
    sched, tasks = build(profile, nodes, seed, metrics)
    ends: list[tuple[float, str]] = []
    timings: list[float] = []
    per_replica: list[float] = []
    cpu_ms: list[float] = []
    warm = len(tasks) - decisions
    for i, task in enumerate(tasks):
        while ends and ends[0][0] <= task.arrival_s:
            _, wid = heapq.heappop(ends)
            sched.release(wid)
        t0 = time.perf_counter()
        c0 = time.thread_time()
        decision = sched.schedule(task.request, enqueue=False)
        cpu = time.thread_time() - c0
        elapsed = time.perf_counter() - t0
        if i >= warm:
            timings.append(elapsed * 1000.0)
            cpu_ms.append(cpu * 1000.0)
            per_replica.append(elapsed * 1000.0 / max(1, len(decision.placements)))
        if decision.scheduled:
            heapq.heappush(ends, (task.arrival_s + task.runtime_s, task.request.id))
        elif any(p.placed for p in decision.placements):
            sched.release(task.request.id)
    t = sched.nodes
    arr = np.array(timings)
    return {
        "profile": profile,
        "metrics": metrics,
        "nodes": len(t),
        "decisions": len(arr),
        "cpu_allocated": float(t.cpu_alloc.sum() / t.cpu_cap.sum()),
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "max_ms": float(arr.max()),
        "p99_per_replica_ms": float(np.percentile(per_replica, 99)),
        # CPU time of the calling thread: what the decision costs, without waiting for a core
        # on a shared machine.
        "p99_cpu_ms": float(np.percentile(cpu_ms, 99)),
        "decisions_per_s": float(len(arr) / (arr.sum() / 1000.0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--profiles", default="default,binpack,edgeplane")
    parser.add_argument("--decisions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--metrics", action="store_true", help="record Prometheus metrics as the hub does (their overhead)"
    )
    args = parser.parse_args()
    for profile in args.profiles.split(","):
        print(json.dumps(run(profile, args.nodes, args.decisions, args.seed, args.metrics)))


if __name__ == "__main__":
    main()
