"""Two-level placement at scale: decision latency of ``Scheduler.schedule`` over a federation of
many clusters, against one cluster of the same size as each member (a command, not a test).

    python bench/federation_scale.py [--clusters 10,30,100] [--nodes-per-cluster 100]
                                     [--decisions 2000] [--json F] [--plot F.png]

For each federation size it builds ``C`` clusters of ``--nodes-per-cluster`` nodes each (the
seed-200 fleet's node groups scaled to that size, one region per ten clusters, each cluster with
its own cost and carbon figures so that the cluster plan has something to weigh), loads the fleet
with the preset's workload mix (the first ``--max-workloads`` arrivals of ``--hours``, placed and
released after their runtime; the table says how full the fleet got),
and times the last ``--decisions`` schedule() calls with the edgeplane profile: the cluster plan
(every cluster's free capacity, the federation's policy) and then each replica's cycle over its
planned cluster's nodes. A quarter of the workloads ask for a region and a tenth for one cluster
(``affinity``), as a federation's users would. The floor is the same workloads on one cluster of
``--nodes-per-cluster`` nodes (no plan, the same per-cluster cycle); the ratio says what the
federation costs. Wall and thread-CPU percentiles per decision; Karmada reports 32 ms p99 at 100
clusters, the target here is 5 ms.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from scheduler_latency import preset_nodes  # bench/, beside this file

from controlplane.federation.config import ClusterConfig, FederationConfig
from controlplane.scheduling.model import Affinity
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.presets import get_preset, scale_preset
from controlplane.sim.runner import _data_nodes
from controlplane.sim.workload import generate_tasks

PROFILE = "edgeplane"


def federation(clusters: int) -> FederationConfig | None:
    if clusters < 2:
        return None
    rng = np.random.default_rng(clusters)
    return FederationConfig(
        clusters=[
            ClusterConfig(
                name=f"c{i:03d}",
                region=f"r{i // 10}",
                cost_per_core_hour=float(rng.uniform(0.02, 0.05)),
                carbon_g_per_kwh=float(rng.uniform(50, 500)),
            )
            for i in range(clusters)
        ],
        default_cluster="c000",
    )


def build(
    clusters: int, per_cluster: int, seed: int, hours: float, max_workloads: int
) -> tuple[Scheduler, list[Any]]:
    preset = scale_preset(get_preset("seed-200"), per_cluster)
    fed = federation(clusters)
    sched = Scheduler(PROFILE, fed, seed=seed, clock=lambda: 0.0)
    names = [c.name for c in fed.clusters] if fed is not None else ["default"]
    regions = [c.region for c in fed.clusters] if fed is not None else ["local"]
    for cluster, region in zip(names, regions, strict=True):
        for node in preset_nodes(preset, cluster=cluster if fed is not None else "", region=region):
            sched.upsert_node(node)
    # The workload of the whole federation: the preset's mix scaled to all its nodes.
    load = scale_preset(get_preset("seed-200"), per_cluster * len(names))
    tasks = generate_tasks(load, hours, seed, data_nodes=_data_nodes(preset))[:max_workloads]
    rng = np.random.default_rng(seed)
    shaped = []
    for task in tasks:
        draw = rng.random()
        request = task.request
        if fed is not None and draw < 0.25:
            request = replace(request, affinity=Affinity(regions=[regions[int(rng.integers(len(regions)))]]))
        elif fed is not None and draw < 0.35:
            request = replace(request, affinity=Affinity(clusters=[names[int(rng.integers(len(names)))]]))
        shaped.append(replace(task, request=request))
    return sched, shaped


def run(
    clusters: int, per_cluster: int, decisions: int, seed: int, hours: float, max_workloads: int
) -> dict[str, float]:
    sched, tasks = build(clusters, per_cluster, seed, hours, max_workloads)
    ends: list[tuple[float, str]] = []
    wall: list[float] = []
    cpu: list[float] = []
    placed = 0
    timed = tasks[-decisions:] if decisions < len(tasks) else tasks
    first_timed = len(tasks) - len(timed)
    for i, task in enumerate(tasks):
        while ends and ends[0][0] <= task.arrival_s:
            _, wid = heapq.heappop(ends)
            sched.release(wid)
        t0, c0 = time.perf_counter(), time.thread_time()
        decision = sched.schedule(task.request, enqueue=False)
        c1, t1 = time.thread_time(), time.perf_counter()
        if i >= first_timed:
            wall.append((t1 - t0) * 1000.0)
            cpu.append((c1 - c0) * 1000.0)
            placed += sum(1 for p in decision.placements if p.placed)
        if decision.scheduled:
            heapq.heappush(ends, (task.arrival_s + task.runtime_s, task.request.id))
        elif any(p.placed for p in decision.placements):
            sched.release(task.request.id)
    w, c = np.array(wall), np.array(cpu)
    return {
        "clusters": clusters,
        "nodes": len(sched.nodes),
        "decisions": len(w),
        "placed_share": placed / max(1, sum(t.request.replicas for t in timed)),
        "p50_ms": float(np.percentile(w, 50)),
        "p99_ms": float(np.percentile(w, 99)),
        "max_ms": float(w.max()),
        "p99_cpu_ms": float(np.percentile(c, 99)),
        "cpu_allocated": float(sched.nodes.cpu_alloc.sum() / sched.nodes.cpu_cap.sum()),
        "workloads": len(tasks),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", default="10,30,100")
    parser.add_argument("--nodes-per-cluster", type=int, default=100)
    parser.add_argument("--decisions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--hours", type=float, default=0.25, help="the span the arrivals are drawn over (default 0.25)"
    )
    parser.add_argument(
        "--max-workloads",
        type=int,
        default=12_000,
        help="at most this many of them, in arrival order (the last --decisions are timed)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.clusters.split(",") if x]

    def one(clusters: int) -> dict[str, float]:
        return run(
            clusters, args.nodes_per_cluster, args.decisions, args.seed, args.hours, args.max_workloads
        )

    floor = one(1)
    rows = [floor] + [one(c) for c in sizes]
    print(
        f"federation scale: {args.nodes_per_cluster} nodes per cluster, profile {PROFILE}, "
        f"last {args.decisions} decisions"
    )
    print(
        "| clusters | nodes | p50 ms | p99 ms | max ms | p99 CPU ms | p99 vs one cluster "
        "| replicas placed | CPU allocated |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['clusters']} | {r['nodes']:,} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['max_ms']:.1f} | {r['p99_cpu_ms']:.2f} | {r['p99_ms'] / floor['p99_ms']:.2f}x | "
            f"{100 * r['placed_share']:.0f}% | "
            f"{100 * r['cpu_allocated']:.0f}% |"
        )
    if args.json:
        args.json.write_text(json.dumps({"floor": floor, "runs": rows[1:]}, indent=2) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        xs = [r["clusters"] for r in rows]
        ax.plot(xs, [r["p99_ms"] for r in rows], "o-", label="p99 per decision")
        ax.plot(xs, [r["p50_ms"] for r in rows], "s--", label="p50 per decision")
        ax.axhline(5.0, color="grey", ls=":", lw=1, label="target (5 ms)")
        ax.set_xscale("log")
        ax.set_xlabel(f"clusters ({args.nodes_per_cluster} nodes each)")
        ax.set_ylabel("ms")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
