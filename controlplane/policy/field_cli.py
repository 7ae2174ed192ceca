"""``controlplane policy field-log`` and ``policy finetune``: field experience for the placement
policy (:mod:`controlplane.learn.field`, :mod:`controlplane.learn.finetune`).

* ``field-log``: run a trained policy (``train --algo ppo`` output) in the stepping simulator on
  physics seeds of one family, exploring, and write its decision log with Laplace-noised
  rewards (the simulator stands for the field: the log is all the learner sees);
* ``finetune``: fine-tune a trained policy offline from such a log (advantage-weighted, held
  near the starting policy by a KL term) into a new model directory that ``eval`` and
  ``export --algo ppo`` take.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["configure", "run"]

COMMANDS = ("field-log", "finetune")


def _epsilon(text: str) -> float | None:
    if text.lower() in ("none", "inf", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'none': {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0 (or 'none' for exact rewards)")
    return value


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated numbers: {text!r}") from None


def configure(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    log = sub.add_parser("field-log", help="log a trained placement policy's decisions in one physics family")
    log.add_argument("--model", required=True, help="a `train --algo ppo` output directory")
    log.add_argument("--name", default="model", help="model.zip (default) or bc.zip in --model")
    log.add_argument(
        "--family", required=True, help="physics family: knee, convex-membw, pairwise, noisy-power"
    )
    log.add_argument("--episodes", type=int, default=16, help="episodes to log")
    log.add_argument("--presets", default="edge-battery,seed-200", help="comma-separated")
    log.add_argument("--loads", type=_floats, default=(1.3, 1.6), help="load factors, comma-separated")
    log.add_argument("--horizon", type=float, default=900.0, help="measured seconds per episode")
    log.add_argument("--nodes", type=int, default=12, help="each preset's fleet scaled to this many nodes")
    log.add_argument("--explore", type=float, default=0.1, help="share of uniformly random decisions")
    log.add_argument(
        "--epsilon", type=_epsilon, default=1.0, help="Laplace epsilon of the rewards ('none': exact)"
    )
    log.add_argument("--clip", type=float, default=2.0, help="rewards clipped to [-clip, clip] first")
    log.add_argument("--seed", type=int, default=0, help="arrival seeds, exploration and noise")
    log.add_argument("--out", required=True, help="the log file (.npz)")

    tune = sub.add_parser("finetune", help="fine-tune a placement policy offline from a field log")
    tune.add_argument("--model", required=True, help="the starting `train --algo ppo` output directory")
    tune.add_argument("--name", default="model", help="model.zip (default) or bc.zip in --model")
    tune.add_argument("--logs", required=True, help="a `policy field-log` file")
    tune.add_argument("--out", required=True, help="the new model directory")
    tune.add_argument("--beta", type=float, default=1.0, help="advantage temperature")
    tune.add_argument("--kl", type=float, default=1.0, help="weight of the KL to the starting policy")
    tune.add_argument("--epochs", type=int, default=4, help="actor epochs")
    tune.add_argument("--value-epochs", type=int, default=4, help="critic epochs")
    tune.add_argument("--lr", type=float, default=3e-4, help="learning rate")
    tune.add_argument("--gamma", type=float, default=0.99, help="discount of the returns")
    tune.add_argument("--seed", type=int, default=0, help="batching seed")


def _say(message: str) -> None:
    print(f"[policy] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from controlplane.learn.ppo import MissingTrainDeps

    try:
        return _field_log(args) if args.policy_command == "field-log" else _finetune(args)
    except (MissingTrainDeps, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _field_log(args: argparse.Namespace) -> int:
    from controlplane.learn.curriculum import TRAIN_ARRIVAL_SEEDS, TRAIN_PHYSICS_SEEDS
    from controlplane.learn.evaluate import Case
    from controlplane.learn.field import collect, family_seeds
    from controlplane.learn.finetune import behaviour_of, max_nodes_of

    if args.episodes < 1:
        raise ValueError("--episodes must be >= 1")
    if not 0.0 <= args.explore <= 1.0:
        raise ValueError("--explore must be in [0, 1]")
    presets = [p for p in args.presets.split(",") if p]
    if not presets or not args.loads:
        raise ValueError("--presets and --loads need at least one value each")
    model = Path(args.model)
    if not (model / f"{args.name}.zip").exists():
        raise FileNotFoundError(f"--model: no {args.name}.zip in {model}")
    # The field's physics seeds come from the training pool, so that evaluations on the
    # held-out seeds (above it) never meet a physics the log came from.
    physics = family_seeds(args.family, TRAIN_PHYSICS_SEEDS, count=4)
    import numpy as np

    rng = np.random.default_rng(args.seed)
    cases = [
        Case(
            presets[i % len(presets)],
            float(args.loads[(i // len(presets)) % len(args.loads)]),
            int(rng.integers(TRAIN_ARRIVAL_SEEDS.start, TRAIN_ARRIVAL_SEEDS.stop)),
            physics[i % len(physics)],
            args.horizon,
            args.nodes,
        )
        for i in range(args.episodes)
    ]
    log = collect(
        behaviour_of(model, args.name),
        cases,
        explore=args.explore,
        epsilon=args.epsilon,
        clip=args.clip,
        seed=args.seed,
        max_nodes=max_nodes_of(model),
        log=_say,
    )
    log.meta["model"] = str(model / f"{args.name}.zip")
    log.save(Path(args.out))
    _say(f"wrote {len(log)} decisions of {args.episodes} episodes ({args.family}) to {args.out}")
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from controlplane.learn.field_log import FieldLog
    from controlplane.learn.finetune import FinetuneConfig, finetune

    model = Path(args.model)
    if not (model / f"{args.name}.zip").exists():
        raise FileNotFoundError(f"--model: no {args.name}.zip in {model}")
    cfg = FinetuneConfig(
        gamma=args.gamma,
        beta=args.beta,
        kl=args.kl,
        epochs=args.epochs,
        value_epochs=args.value_epochs,
        learning_rate=args.lr,
        seed=args.seed,
    )
    finetune(model, FieldLog.load(Path(args.logs)), Path(args.out), cfg=cfg, name=args.name, log=_say)
    return 0
