"""Decision latency of ``Scheduler.schedule`` on a large fleet (a command, not a test).

Builds the seed-200 fleet scaled to each of ``--nodes``, loads it to a steady state with the
preset's workload mix (placing arrivals, releasing them after their runtime in arrival order),
then times the last ``--decisions`` schedule() calls per profile, explanations included as the
hub asks for them, and prints a table: p50/p99/max per call (a workload of 4 replicas is one call:
4 cycles), p99 per replica, p99 of the calling thread's CPU time (immune to other processes
competing for the cores), decisions and placements (replicas) per second of wall clock and
placements per second of the thread's CPU time (one core's rate), and each profile's placement
rate as a ratio to the first profile's at the same fleet size.

    python bench/scheduler_latency.py --nodes 1000,5000 --profiles default,binpack,edgeplane \
        --json latency.json --plot latency.png
    python bench/scheduler_latency.py --nodes 1000 --profiles edgeplane --metrics   # with /metrics' recording
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from controlplane.observe.scheduler import SchedulerMetrics
from controlplane.scheduling.model import GpuDevice, NodeState
from controlplane.scheduling.nodetable import ZONE_LABEL
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.presets import GB, Preset, get_preset, scale_preset
from controlplane.sim.runner import _data_nodes
from controlplane.sim.workload import generate_tasks


def preset_nodes(preset: Preset, *, cluster: str = "", region: str = "local") -> Iterator[NodeState]:
    """The preset's node groups as the scheduler's nodes (names and racks prefixed by ``cluster``
    when one is given, in the default cluster otherwise)."""
    prefix = f"{cluster}-" if cluster else ""
    for group in preset.groups:
        for k in range(group.count):
            yield NodeState(
                name=f"{prefix}{group.prefix}-{k:03d}",
                labels={ZONE_LABEL: f"{prefix}{group.prefix}-r{k // group.rack_size}"},
                cpu=group.cpu,
                memory=int(group.memory_gb * GB),
                gpus=[GpuDevice(i, mig_enabled=i < group.mig_gpus) for i in range(group.gpus)],
                dpus=group.dpus,
                node_type=group.node_type,
                cluster=cluster or "default",
                region=region,
            )


def build(profile: str, nodes: int, seed: int, metrics: bool = False) -> tuple[Scheduler, list]:
    preset = scale_preset(get_preset("seed-200"), nodes)
    clock = [0.0]
    # --metrics: the hub's Prometheus recorder (attempts, extension points, sampled plugins).
    recorder = SchedulerMetrics(CollectorRegistry()) if metrics else None
    sched = Scheduler(profile, seed=seed, clock=lambda: clock[0], recorder=recorder)
    for node in preset_nodes(preset):
        sched.upsert_node(node)
    tasks = generate_tasks(preset, 1.0, seed, data_nodes=_data_nodes(preset))
    return sched, tasks


def run(
    profile: str, nodes: int, decisions: int, seed: int, metrics: bool = False, explain: bool = True
) -> dict[str, float | str | bool]:
    sched, tasks = build(profile, nodes, seed, metrics)
    ends: list[tuple[float, str]] = []
    timings: list[float] = []
    per_replica: list[float] = []
    cpu_ms: list[float] = []
    placed = 0
    warm = len(tasks) - decisions
    for i, task in enumerate(tasks):
        while ends and ends[0][0] <= task.arrival_s:
            _, wid = heapq.heappop(ends)
            sched.release(wid)
        t0 = time.perf_counter()
        c0 = time.thread_time()
        # Explanations only where timed (they change no decision; the warm-up is faster without).
        decision = sched.schedule(task.request, enqueue=False, explain=explain and i >= warm)
        cpu = time.thread_time() - c0
        elapsed = time.perf_counter() - t0
        if i >= warm:
            timings.append(elapsed * 1000.0)
            cpu_ms.append(cpu * 1000.0)
            per_replica.append(elapsed * 1000.0 / max(1, len(decision.placements)))
            placed += sum(1 for p in decision.placements if p.placed)
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
        # A placement is one replica placed (what kube-scheduler counts as a scheduled pod).
        "placements_per_s": float(placed / (arr.sum() / 1000.0)),
        # The same by the thread's CPU time: one core's rate, whatever else runs on the machine.
        "placements_per_cpu_s": float(placed / (sum(cpu_ms) / 1000.0)),
        "explain": explain,
    }


_COLUMNS = (
    ("nodes", "nodes", "{:.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms/call", "p99_ms", "{:.2f}"),
    ("p99 ms/replica", "p99_per_replica_ms", "{:.2f}"),
    ("p99 CPU ms", "p99_cpu_ms", "{:.2f}"),
    ("max ms", "max_ms", "{:.1f}"),
    ("decisions/s", "decisions_per_s", "{:,.0f}"),
    ("placements/s", "placements_per_s", "{:,.0f}"),
    ("placements/CPU-s", "placements_per_cpu_s", "{:,.0f}"),
)


def table(results: list[dict[str, float | str | bool]]) -> str:
    """A Markdown table, one row per (fleet size, profile), with the placement rate as a ratio to
    the first profile's at the same fleet size."""
    head = ["profile", *(c[0] for c in _COLUMNS), "placements/s vs " + str(results[0]["profile"])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base: dict[float, float] = {}
    for r in results:
        rate = float(r["placements_per_s"])
        ref = base.setdefault(float(r["nodes"]), rate)
        cells = [
            str(r["profile"]),
            *(fmt.format(float(r[key])) for _, key, fmt in _COLUMNS),
            f"{rate / ref:.2f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict[str, float | str | bool]], path: str) -> None:
    """Placements per second and p99 per call against fleet size, one colour per profile: solid
    by the thread's CPU time (one core's rate), dashed by the wall clock (what a shared machine
    left of it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    for i, profile in enumerate(dict.fromkeys(str(r["profile"]) for r in results)):
        rows = sorted((r for r in results if r["profile"] == profile), key=lambda r: float(r["nodes"]))
        xs = [float(r["nodes"]) for r in rows]
        colour = f"C{i}"
        left.plot(xs, [float(r["placements_per_cpu_s"]) for r in rows], "o-", color=colour, label=profile)
        left.plot(xs, [float(r["placements_per_s"]) for r in rows], "o--", color=colour, alpha=0.5)
        right.plot(xs, [float(r["p99_cpu_ms"]) for r in rows], "o-", color=colour, label=profile)
        right.plot(xs, [float(r["p99_ms"]) for r in rows], "o--", color=colour, alpha=0.5)
    left.axhline(1000, color="grey", linestyle=":", linewidth=1)
    right.axhline(5, color="grey", linestyle=":", linewidth=1)
    left.set(xlabel="nodes", ylabel="placements/s", title="throughput (solid: per CPU-s, dashed: wall)")
    right.set(xlabel="nodes", ylabel="p99 ms per call", title="p99 per call (solid: CPU, dashed: wall)")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000", help="fleet sizes, comma-separated (e.g. 1000,5000)")
    parser.add_argument("--profiles", default="default,binpack,edgeplane")
    parser.add_argument("--decisions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--metrics", action="store_true", help="record Prometheus metrics as the hub does (their overhead)"
    )
    parser.add_argument(
        "--no-explain", action="store_true", help="time decisions without explanations (the hub always asks)"
    )
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--plot", help="save a plot (PNG) of throughput and p99 against fleet size")
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: expected comma-separated integers, got {args.nodes!r}")
    results = []
    for nodes in sizes:
        for profile in args.profiles.split(","):
            result = run(profile, nodes, args.decisions, args.seed, args.metrics, not args.no_explain)
            print(json.dumps(result), file=sys.stderr)
            results.append(result)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
