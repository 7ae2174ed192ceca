"""Canary rollout in the simulator: a good placement model is promoted, a bad one rolled back,
and what the rollback saved against the bad model placing everything.

    python bench/canary.py [--seeds 5151:9191,6262:7373] [--hours 2] [--json F] [--plot F.png]

Policies rolled out: ``good``, the shipped PPO placement model
(controlplane/learn/model/placement.fp32.onnx); ``worst``, a deliberately bad policy that places
each replica on the candidate the edgeplane profile scores lowest (it ignores the SLA and energy
terms the profile weighs); ``negated``, the shipped network with its node scores negated (built
here with ``onnx``: what the model ranks worst). For each arrival:physics seed pair (held out from
the model's training pools) on ``edge-battery`` at load 1.3 with 12 nodes, it runs ``edgeplane``
(the baseline, no canary), each bad policy placing every workload (``*-everywhere``: what a
rollback protects against) and each policy as a canary (10% -> 50% -> 100%, 10 minutes a step,
rolled back after 2 minutes over a 0.25 anomaly score). It prints the timelines and a table of SLA
violations and energy with the ratios to the baseline and to the policy everywhere, and saves a
plot of the canaries' share over time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from controlplane.learn.chooser import LearnedChooser
from controlplane.rollout import CanaryChooser, CanaryController, RolloutConfig
from controlplane.sim.cli import format_canary
from controlplane.sim.runner import register_scheduler, run_comparison

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "controlplane" / "learn" / "model" / "placement.fp32.onnx"
CONFIG = RolloutConfig(steps=(0.1, 0.5, 1.0), dwell_s=600.0, sustain_s=120.0)


def negated(src: Path, dst: Path) -> Path:
    """``src`` with the last layer of its node scorer negated: it prefers what it ranked worst."""
    model = onnx.load(str(src))
    for init in model.graph.initializer:
        if init.name in ("node.2.weight", "node.2.bias"):
            init.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(init), init.name))
    onnx.save(model, str(dst))
    return dst


def worst(choice: Any) -> int:
    """The candidate the profile scores lowest."""
    ranking = choice.ranking
    finite = np.flatnonzero(np.isfinite(ranking))
    return int(finite[np.argmin(ranking[finite])]) if len(finite) else int(choice.best)


RUNS = (
    "edgeplane",
    "worst-everywhere",
    "canary-worst",
    "negated-everywhere",
    "canary-negated",
    "canary-good",
)
EVERYWHERE = {"canary-worst": "worst-everywhere", "canary-negated": "negated-everywhere"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="5:9,5151:9191,6262:7373", help="arrival:physics pairs")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    pairs = [tuple(int(x) for x in p.split(":")) for p in args.seeds.split(",") if p]
    with tempfile.TemporaryDirectory() as tmp:
        bad_model = negated(SHIPPED, Path(tmp) / "negated.onnx")

        def canary(policy: Any) -> Any:
            return lambda sched: CanaryChooser(policy(), CanaryController(CONFIG)).attach(sched)

        choosers = {
            "worst-everywhere": lambda sched: setattr(sched, "chooser", worst),
            "canary-worst": canary(lambda: worst),
            "negated-everywhere": lambda sched: LearnedChooser(bad_model).attach(sched),
            "canary-negated": canary(lambda: LearnedChooser(bad_model)),
            "canary-good": canary(lambda: LearnedChooser(SHIPPED)),
        }
        for name in RUNS[1:]:
            register_scheduler(name, "edgeplane")
        results: list[dict[str, Any]] = []
        for seed, physics in pairs:
            t0 = time.perf_counter()
            report = run_comparison(
                preset="edge-battery",
                schedulers=list(RUNS),
                hours=args.hours,
                seed=seed,
                nodes=12,
                load=1.3,
                physics_seed=physics,
                choosers=choosers,
            )
            wall = time.perf_counter() - t0
            results.append({"seed": seed, "physics_seed": physics, "wall_s": wall, "runs": report["runs"]})
            for name in ("canary-worst", "canary-negated", "canary-good"):
                print(f"seed {seed}/{physics} {name}: " + format_canary(report["runs"][name]["chooser"]))
    print()
    print(
        "| seed | run | SLA violations | energy kWh | SLA vs edgeplane | SLA vs the policy everywhere "
        "| canary |"
    )
    print("|---|---|---:|---:|---:|---:|---|")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else ("1.00x" if a == b else "-")

    for r in results:
        runs = r["runs"]
        base = runs["edgeplane"]["sla_violation_rate"]
        for name in RUNS:
            run = runs[name]
            sla = run["sla_violation_rate"]
            everywhere = runs[EVERYWHERE[name]]["sla_violation_rate"] if name in EVERYWHERE else None
            described = run.get("chooser", {})
            state = described.get("state", "-")
            if state == "rolled_back":
                state += f" at {described['events'][-1]['t_s'] / 60:.0f} min"
            print(
                f"| {r['seed']}/{r['physics_seed']} | {name} | {100 * sla:.2f}% | {run['energy_kwh']:.2f} | "
                f"{ratio(sla, base)} | {'-' if everywhere is None else ratio(sla, everywhere)} | {state} |"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for r, style in zip(results, ("-", "--", ":", "-."), strict=False):
            for name, color in (
                ("canary-worst", "tab:red"),
                ("canary-negated", "tab:orange"),
                ("canary-good", "tab:green"),
            ):
                events = r["runs"][name]["chooser"]["events"]
                xs: list[float] = []
                ys: list[float] = []
                for e in events:
                    if xs:
                        xs.append(e["t_s"] / 60)
                        ys.append(ys[-1])
                    xs.append(e["t_s"] / 60)
                    ys.append(100 * e["fraction"])
                xs.append(args.hours * 60)
                ys.append(ys[-1])
                ax.plot(xs, ys, style, color=color, label=f"{name} {r['seed']}/{r['physics_seed']}")
        ax.set_xlabel("simulated minutes")
        ax.set_ylabel("canary share of new workloads (%)")
        ax.set_ylim(-5, 105)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
