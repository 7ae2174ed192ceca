"""Field experience, measured: fine-tune a placement policy offline from decision logs of one
physics family, then evaluate it on held-out seeds of that family and of another one.

Usage (the [train] extra; a starting model from ``controlplane policy train --algo ppo``, e.g.
the behaviour-cloned start: ``controlplane policy train --algo ppo --timesteps 0 --out build/ppo-bc``):

    python bench/field_finetune.py --model build/ppo-bc --log-family convex-membw \
        --other-family pairwise --episodes 24 --epsilons none,10,1 --json out.json --plot out.png

The log is made once with exact rewards (the starting policy, exploring); each privacy level
gets its own Laplace-noised copy of those rewards and its own fine-tune. Every policy then runs
the same held-out cases: arrival seeds 5151/6262 paired with the first two physics seeds of
each family at or above 9000 (training and the log draw physics seeds from 1..64, arrivals from
0..4999). Beside them, in the same run: the heuristic the starting policy was cloned from (the
teacher, the floor a learned policy must clear) and the starting policy itself (the baseline);
ratios are to the baseline. The learner never reads the simulator: only the log.
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

from controlplane.learn.curriculum import TRAIN_ARRIVAL_SEEDS, TRAIN_PHYSICS_SEEDS
from controlplane.learn.evaluate import HELD_OUT_ARRIVAL_SEEDS, Case, evaluate, heuristic
from controlplane.learn.field import collect, family_seeds
from controlplane.learn.field_log import FieldLog, laplace_noise
from controlplane.learn.finetune import FinetuneConfig, behaviour_of, finetune, max_nodes_of
from controlplane.learn.ppo import load_policy
from controlplane.policy.field_cli import _epsilon

HELD_OUT_PHYSICS_FROM = 9000


def _say(message: str) -> None:
    print(f"[field] {message}", file=sys.stderr, flush=True)


def _label(epsilon: float | None) -> str:
    return "tuned (exact rewards)" if epsilon is None else f"tuned (epsilon {epsilon:g})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="the starting `train --algo ppo` directory")
    parser.add_argument("--name", default="model")
    parser.add_argument("--log-family", default="convex-membw")
    parser.add_argument("--other-family", default="pairwise")
    parser.add_argument("--episodes", type=int, default=24, help="logged episodes (900 s each)")
    parser.add_argument("--explore", type=float, default=0.1)
    parser.add_argument("--epsilons", default="none,10,1", help="privacy levels, comma-separated")
    parser.add_argument("--presets", default="edge-battery,seed-200")
    parser.add_argument("--loads", default="1.3,2.0", help="held-out loads")
    parser.add_argument("--horizon", type=float, default=900.0, help="held-out episodes' measured seconds")
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--kl", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.99, help="discount of the logged returns")
    parser.add_argument(
        "--eval-physics-from",
        type=int,
        default=HELD_OUT_PHYSICS_FROM,
        help="evaluation physics seeds start here (tune settings below 9000, e.g. 100: not held out)",
    )
    parser.add_argument(
        "--eval-arrival-seeds",
        default=",".join(str(s) for s in HELD_OUT_ARRIVAL_SEEDS),
        help="two arrival seeds, paired with each family's two physics seeds (tune on others)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args()
    started = time.perf_counter()
    model = Path(args.model)
    presets = [p for p in args.presets.split(",") if p]
    loads = [float(x) for x in args.loads.split(",") if x]
    epsilons = [_epsilon(x) for x in args.epsilons.split(",") if x]
    arrivals = [int(x) for x in args.eval_arrival_seeds.split(",") if x]
    if len(arrivals) != 2:
        parser.error("--eval-arrival-seeds: give two seeds")

    # 1. the field: the starting policy, exploring, on training-pool seeds of one family
    physics = family_seeds(args.log_family, TRAIN_PHYSICS_SEEDS, count=4)
    rng = np.random.default_rng(args.seed)
    log_cases = [
        Case(
            presets[i % len(presets)],
            (1.3, 1.6)[(i // len(presets)) % 2],
            int(rng.integers(TRAIN_ARRIVAL_SEEDS.start, TRAIN_ARRIVAL_SEEDS.stop)),
            physics[i % len(physics)],
            900.0,
            12,
        )
        for i in range(args.episodes)
    ]
    t0 = time.perf_counter()
    exact = collect(
        behaviour_of(model, args.name),
        log_cases,
        explore=args.explore,
        epsilon=None,
        seed=args.seed,
        max_nodes=max_nodes_of(model),
        log=_say,
    )
    log_s = time.perf_counter() - t0
    _say(f"logged {len(exact)} decisions in {log_s:.0f} s")

    # 2. one fine-tune per privacy level, each from its own noised copy of the same log
    tuned: dict[str, Path] = {}
    tune_reports: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="field-"))
    noise_rng = np.random.default_rng(args.seed + 1)
    for epsilon in epsilons:
        label = _label(epsilon)
        noised = FieldLog(
            exact.obs,
            exact.masks,
            exact.actions,
            exact.behaviour_prob,
            laplace_noise(exact.rewards.astype(np.float64), clip=2.0, epsilon=epsilon, rng=noise_rng),
            exact.ends,
            {**exact.meta, "epsilon": epsilon, "clip": 2.0},
        )
        out = work / label.replace(" ", "_").replace("(", "").replace(")", "")
        cfg = FinetuneConfig(beta=args.beta, kl=args.kl, gamma=args.gamma, seed=args.seed)
        tune_reports[label] = finetune(model, noised, out, cfg=cfg, name=args.name, log=_say)
        tuned[label] = out

    # 3. held-out evaluation in both families, every policy on the same cases
    policies: dict[str, Any] = {"heuristic (teacher)": heuristic, "start": load_policy(model, args.name)[0]}
    for label, path in tuned.items():
        policies[label] = load_policy(path)[0]
    results: dict[str, Any] = {}
    for family in (args.log_family, args.other_family):
        held = family_seeds(family, range(args.eval_physics_from, args.eval_physics_from + 2000), count=2)
        cases = [
            Case(p, load, a, ph, args.horizon, 12)
            for p in presets
            for load in loads
            for a, ph in zip(arrivals, held, strict=True)
        ]
        results[family] = evaluate(policies, cases, max_nodes=max_nodes_of(model), log=_say)

    _print(results, args)
    report = {
        "log": {
            "decisions": len(exact),
            "episodes": args.episodes,
            "family": args.log_family,
            "wall_s": log_s,
        },
        "finetune": tune_reports,
        "evaluation": results,
        "wall_s": time.perf_counter() - started,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        _plot(results, Path(args.plot))
    return 0


def _print(results: dict[str, Any], args: argparse.Namespace) -> None:
    for family, result in results.items():
        where = "the log's family" if family == args.log_family else "another family"
        print(f"\nheld-out {family} ({where}); seeds {result['held_out']['physics_seeds']}")
        print("| policy | mean return | minus the start's | SLA violations | energy (kWh) | served util. |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        base = result["policies"]["start"]["mean_return"]
        for name, m in result["policies"].items():
            # Returns are mostly costs (negative), so the difference reads better than a ratio.
            print(
                f"| {name} | {m['mean_return']:.2f} | {m['mean_return'] - base:+.2f} "
                f"| {100 * m['sla_violation_rate']:.2f}% "
                f"| {m['energy_kwh']:.3f} | {100 * m['served_utilization']:.2f}% |"
            )


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (family, result) in zip(axes[0], results.items(), strict=True):
        names = list(result["policies"])
        values = [result["policies"][n]["mean_return"] for n in names]
        ax.bar(range(len(names)), values, color=["grey", "tab:blue"] + ["tab:green"] * (len(names) - 2))
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"held-out {family}")
        ax.set_ylabel("mean return (higher is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
