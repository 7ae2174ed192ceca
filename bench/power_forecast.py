"""The power manager with a demand forecast against fixed reserves: energy, and waits in bursts.

The simulator's power manager (``controlplane/sim/power_manager.py``) keeps a reserve of awake,
free CPU so that arriving work need not wait for a node to wake. Shipped, the reserve is fixed:
10% of each pool's CPU and 3% of its nodes awake and empty. With ``forecast`` it is sized from a
forecast of the CPU that will be requested before a node woken now is ready
(``controlplane.predict.online``: the season's profile and an EWMA level over 5-minute bins of
the requests seen so far, never the arrival process), above a floor (shipped: none, but one awake,
empty node per pool).

A forecast only earns its keep if it beats simply holding the floor, so every scenario runs:

- ``off``: no power manager (every node awake: the SLA floor, the energy ceiling);
- ``fixed``: the shipped reserve (10% CPU, 3% empty nodes);
- ``floor``: the forecast's floor alone, fixed (shipped: no reserve but one empty node a pool);
- ``forecast``: the floor plus the forecast times ``--margin``.

Scenarios: the synthetic presets (default ``seed-200`` and ``edge-battery``) over ``--hours``
with their burst windows (8 a day, 3x the rate for 10 minutes; the windows are recomputed from the
arrival seed for measuring only), and the Azure VM 2017 trace's dev split (``--vm-hours``, 0 to
skip; needs ``--trace-dir``). Per run: energy, mean nodes powered, SLA violations (all, and of the
tasks arriving in a burst window or the 10 minutes after it), queueing p99 in bursts; for the VMs,
the share of VMs that queued and the arrivals that needed a wake. Ratios against ``fixed``.

    python bench/power_forecast.py [--presets seed-200,edge-battery] [--seeds 42,7] [--hours 24]
        [--vm-hours 83.4 --trace-dir ../shared/traces/azure-vm2017] [--margin 2] [--jobs 2]
        [--json F] [--plot F.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from controlplane.sim.engine import Simulation
from controlplane.sim.metrics import summarise
from controlplane.sim.presets import Preset, get_preset
from controlplane.sim.runner import SCHEDULERS, build_scenario
from controlplane.sim.vmreplay import VmSimulation, _vm_metrics, offered_cpu, size_fleet, vm_preset, vm_tasks
from controlplane.sim.vmtrace import BIN_S, load_vm_trace
from controlplane.sim.workload import burst_windows

VARIANTS = ("off", "fixed", "floor", "forecast")
Floors = tuple[float, float] | None
AFTER_BURST_S = 600.0  # a burst's queue outlasts its window: count the 10 minutes after it too


def variant_preset(preset: Preset, variant: str, margin: float, floors: Floors = None) -> Preset:
    """The preset with the power manager of ``variant`` (``floors``: the forecast's floor of free
    CPU and of empty nodes, both fractions; None: the shipped defaults)."""
    pm = preset.power_manager
    if floors is not None:
        pm = replace(pm, forecast_floor_fraction=floors[0], forecast_empty_fraction=floors[1])
    if variant == "off":
        return replace(preset, power_manager=replace(pm, enabled=False, forecast=False))
    if variant == "fixed":
        return replace(preset, power_manager=replace(pm, enabled=True, forecast=False))
    if variant == "floor":
        fixed_floor = replace(
            pm,
            enabled=True,
            forecast=False,
            reserve_fraction=pm.forecast_floor_fraction,
            reserve_empty_fraction=pm.forecast_empty_fraction,
        )
        return replace(preset, power_manager=fixed_floor)
    return replace(preset, power_manager=replace(pm, enabled=True, forecast=True, forecast_margin=margin))


def _in_windows(t: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= t < b + AFTER_BURST_S for a, b in windows)


def _burst_figures(tasks: list[dict[str, Any]], windows: list[tuple[float, float]]) -> dict[str, Any]:
    burst = [t for t in tasks if _in_windows(t["arrival_s"], windows)]
    with_sla = [t for t in burst if t["sla_s"] is not None]
    queues = [t["queue_s"] for t in burst if t["queue_s"] is not None]
    return {
        "burst_tasks": len(burst),
        "burst_sla_violation_rate": sum(t["violated"] for t in with_sla) / len(with_sla) if with_sla else 0.0,
        "burst_p99_queue_s": float(np.percentile(queues, 99)) if queues else 0.0,
        "burst_queued_rate": sum(1 for q in queues if q > 0) / len(queues) if queues else 0.0,
    }


def run_preset(
    name: str, seed: int, hours: float, variant: str, margin: float, floors: Floors = None
) -> dict[str, Any]:
    """One synthetic run; its figures."""
    scenario = build_scenario(get_preset(name), hours=hours, seed=seed, physics_seed=None)
    preset = variant_preset(scenario.preset, variant, margin, floors)
    sim = Simulation(preset, scenario.tasks, scheduler_name="edgeplane", profile=SCHEDULERS["edgeplane"],
                     hours=hours, seed=seed, physics=scenario.physics)  # fmt: skip
    mean_node_cpu = sum(n.cpu for n in sim.nodes) / len(sim.nodes)
    started = time.perf_counter()
    record = sim.run()
    summary = summarise(record)
    sla = [t for t in record.tasks if t["sla_s"] is not None]
    return {
        "scenario": name,
        "seed": seed,
        "variant": variant,
        "energy_kwh": summary["energy_kwh"],
        # Powered CPU over the window in units of the fleet's mean node (nodes of one size: nodes).
        "mean_nodes_powered": record.cap_cpu_t / record.window_s / mean_node_cpu,
        "sla_violation_rate": sum(t["violated"] for t in sla) / len(sla) if sla else 0.0,
        "queued_rate": sum(1 for t in record.tasks if (t["queue_s"] or 0) > 0) / max(1, len(record.tasks)),
        **_burst_figures(record.tasks, burst_windows(scenario.preset, hours, seed)),
        "wall_s": time.perf_counter() - started,
    }


def run_vm(
    trace_dir: str, seed: int, hours: float, variant: str, margin: float, floors: Floors = None
) -> dict[str, Any]:
    """One replay of the VM trace (its first ``hours``); its figures."""
    trace = load_vm_trace(trace_dir, split="dev", hours=hours)
    tasks = vm_tasks(trace, seed)
    horizon = trace.bins * BIN_S
    offered_s, peak = offered_cpu(tasks, horizon)
    preset = variant_preset(vm_preset(size_fleet(peak)), variant, margin, floors)
    sim = VmSimulation(preset, tasks, scheduler_name="edgeplane", profile=SCHEDULERS["edgeplane"],
                       hours=horizon / 3600.0, seed=seed)  # fmt: skip
    started = time.perf_counter()
    base = summarise(sim.run())
    vm = _vm_metrics(sim, base, offered_s)
    return {
        "scenario": "azure-vm",
        "seed": seed,
        "variant": variant,
        "energy_kwh": vm["energy_kwh"],
        "mean_nodes_powered": vm["mean_nodes_powered"],
        "sla_violation_rate": None,
        "queued_rate": vm["queued_rate"],
        "p99_queue_s": vm["p99_queue_s"],
        "wake_needed_arrivals": vm["wake_needed_arrivals"],
        "wall_s": time.perf_counter() - started,
    }


def _job(spec: tuple[str, Any, ...]) -> dict[str, Any]:
    kind, *args = spec
    return run_vm(*args) if kind == "vm" else run_preset(*args)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.3f}x"


def table(runs: list[dict[str, Any]]) -> str:
    """One row per run; energy and nodes as ratios to the same scenario's ``fixed`` run."""
    fixed = {(r["scenario"], r["seed"]): r for r in runs if r["variant"] == "fixed"}
    head = (
        f"{'scenario':14} {'seed':>5} {'variant':9} {'energy kWh':>11} {'/fixed':>8} {'nodes on':>9} "
        f"{'/fixed':>8} {'SLA viol.':>9} {'in bursts':>10} {'queued':>8} {'burst q p99 s':>13} {'wakes':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        ref = fixed.get((r["scenario"], r["seed"]))
        lines.append(
            f"{r['scenario']:14} {r['seed']:>5} {r['variant']:9} {r['energy_kwh']:>11,.1f} "
            f"{_ratio(r['energy_kwh'], ref and ref['energy_kwh']):>8} {r['mean_nodes_powered']:>9.1f} "
            f"{_ratio(r['mean_nodes_powered'], ref and ref['mean_nodes_powered']):>8} "
            f"{_pct(r['sla_violation_rate']):>9} {_pct(r.get('burst_sla_violation_rate')):>10} "
            f"{_pct(r['queued_rate']):>8} "
            f"{r.get('burst_p99_queue_s', r.get('p99_queue_s', 0.0)):>13.1f} "
            f"{r.get('wake_needed_arrivals', '-')!s:>6}"
        )
    return "\n".join(lines)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Energy against in-burst SLA violations (VM: queued share), one point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = sorted({(r["scenario"], r["seed"]) for r in runs})
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.2 * len(scenarios), 3.6), squeeze=False)
    markers = {"off": "s", "fixed": "o", "floor": "v", "forecast": "*"}
    for ax, (scenario, seed) in zip(axes[0], scenarios, strict=True):
        for r in runs:
            if (r["scenario"], r["seed"]) != (scenario, seed):
                continue
            y = r.get("burst_sla_violation_rate")
            y = r["queued_rate"] if y is None else y
            ax.scatter(r["energy_kwh"], 100 * y, marker=markers[r["variant"]], s=70, label=r["variant"])
        ax.set_title(f"{scenario} seed {seed}", fontsize=9)
        ax.set_xlabel("energy (kWh)")
        ax.set_ylabel("SLA violations in bursts (%)" if scenario != "azure-vm" else "VMs that queued (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="seed-200,edge-battery")
    parser.add_argument("--seeds", default="42", help="arrival seeds (comma-separated)")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--vm-hours", type=float, default=0.0, help="VM trace hours to replay (0: none)")
    parser.add_argument("--trace-dir", default=None)
    parser.add_argument("--margin", type=float, default=2.0)
    parser.add_argument(
        "--floors",
        default=None,
        metavar="CPU,EMPTY",
        help="the forecast's (and the floor variant's) reserve floors as fractions of a pool's CPU "
        "and nodes (default: the shipped 0,0)",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    if args.vm_hours > 0 and not args.trace_dir:
        parser.error("--vm-hours needs --trace-dir (the Azure VM trace's folder)")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    floors: Floors = None
    if args.floors:
        try:
            cpu, empty = (float(x) for x in args.floors.split(","))
        except ValueError:
            parser.error(f"--floors: expected CPU,EMPTY (two fractions), got {args.floors!r}")
        floors = (cpu, empty)
    jobs: list[tuple[Any, ...]] = [
        ("preset", name, seed, args.hours, v, args.margin, floors)
        for name in [p for p in args.presets.split(",") if p]
        for seed in seeds
        for v in variants
    ]
    if args.vm_hours > 0:
        vm = ("vm", args.trace_dir)
        jobs += [(*vm, seed, args.vm_hours, v, args.margin, floors) for seed in seeds for v in variants]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(_job, jobs))
    print(table(runs))
    print(
        f"\nmargin {args.margin:g}, floors {floors or 'shipped'}; {len(runs)} runs in "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    if args.json_path:
        report = {"margin": args.margin, "floors": floors, "runs": runs}
        Path(args.json_path).write_text(json.dumps(report, indent=1) + "\n")
    if args.plot:
        plot(runs, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
