"""``controlplane policy ACTION``: build and measure the edge agent's local policy (train, export,
eval, bench), and keep its versions in a running hub (push, list, rollout, promote, rollback).

* ``train``: draw training and validation states (cached as ``.npz`` in ``--work-dir``), distil
  the reward argmax into the MLP, optionally fine-tune, write ``weights.npz`` and a report;
  ``train --algo ppo``: MaskablePPO over the stepping simulator, started by behaviour cloning
  (:mod:`controlplane.learn.ppo`; needs the ``[train]`` extra);
* ``export``: fp32 ONNX, int8 candidates (static QDQ calibrated on environment states, and
  dynamic), measured on held-out seeds; the best is shipped with ``metadata.json``;
* ``eval``: the shipped models against the heuristic and baselines on held-out seeds;
  ``eval --algo ppo --model DIR``: a PPO run against the heuristic on held-out episodes;
* ``bench``: decision latency on one pinned CPU (:mod:`controlplane.policy.bench`);
* ``field-log`` / ``finetune``: the placement policy's field experience, logged with noised
  rewards, and an offline fine-tune from it (:mod:`controlplane.policy.field_cli`);
* ``push`` / ``list`` / ``rollout`` / ``promote`` / ``rollback``: a running hub's policy
  versions (:mod:`controlplane.policies.client`; the checks are the hub's,
  :mod:`controlplane.policies.check`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["configure", "run"]

DEFAULT_WORK_DIR = "build/policy"
DEFAULT_MODEL_DIR = str(Path(__file__).resolve().parents[2] / "edgeplane_contract" / "policy" / "model")
DEFAULT_PLACEMENT_DIR = str(Path(__file__).resolve().parents[1] / "learn" / "model")


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION")
    sub.required = True
    train = sub.add_parser("train", help="distil the reward argmax into the MLP policy (or --algo ppo)")
    train.add_argument(
        "--algo", choices=("distil", "ppo"), default="distil", help="distil (default) or ppo (MaskablePPO)"
    )
    train.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="datasets, weights, reports")
    train.add_argument("--seed", type=int, default=0, help="initialisation and batching seed")
    train.add_argument("--train-seeds", type=int, default=24, help="environment seeds 0..N-1")
    train.add_argument("--states-per-seed", type=int, default=1000, help="training states per seed")
    train.add_argument(
        "--weights-per-state", type=int, default=4, help="reward weightings sampled per state (w1..w4)"
    )
    train.add_argument("--val-states", type=int, default=2000, help="validation states (held-out seeds)")
    train.add_argument("--steps", type=int, default=12000, help="distillation optimiser steps")
    train.add_argument("--hidden", default="128,128", help="hidden layer sizes, comma-separated")
    train.add_argument("--finetune-steps", type=int, default=0, help="REINFORCE steps after distillation")
    train.add_argument(
        "--dp-epsilon", type=float, default=0.1, help="Laplace epsilon for fine-tuning rewards"
    )
    _ppo_train_options(train)
    export = sub.add_parser("export", help="write fp32 + int8 ONNX and metadata.json")
    export.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="where `train` left its weights")
    export.add_argument("--model-dir", default=DEFAULT_MODEL_DIR, help="where the agent's model files go")
    export.add_argument("--eval-seeds", type=int, default=3, help="held-out seeds (1000 states each)")
    export.add_argument(
        "--calibration-states", type=int, default=1000, help="states that calibrate the int8 quantiser"
    )
    export.add_argument(
        "--algo",
        choices=("distil", "ppo"),
        default="distil",
        help="distil: the agent's local policy; ppo: the hub's placement policy from --model",
    )
    g = export.add_argument_group("--algo ppo")
    g.add_argument("--model", help="a `train --algo ppo` output directory")
    g.add_argument(
        "--out", default=DEFAULT_PLACEMENT_DIR, help="placement.{fp32,int8}.onnx and placement.json"
    )
    g.add_argument(
        "--check-horizon", type=float, default=900.0, help="measured seconds per held-out check episode"
    )
    from controlplane.policies.client import configure_client

    configure_client(sub)
    ev = sub.add_parser("eval", help="compare the shipped policy with the heuristic and baselines")
    ev.add_argument("--model-dir", default=DEFAULT_MODEL_DIR, help="the model files to evaluate")
    ev.add_argument("--eval-seeds", type=int, default=3, help="held-out seeds (1000 states each)")
    ev.add_argument("--json", dest="json_path", help="also write the result as JSON here")
    ev.add_argument(
        "--algo", choices=("distil", "ppo"), default="distil", help="distil: the shipped model; ppo: --model"
    )
    _ppo_eval_options(ev)
    from controlplane.policy import bench, field_cli

    bench.configure(sub)
    field_cli.configure(sub)


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError("give at least one positive number")
    return values


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one integer")
    return values


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _ppo_train_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--algo ppo")
    g.add_argument(
        "--timesteps", type=int, default=100_000, help="PPO environment steps (decisions); 0: BC only"
    )
    g.add_argument("--out", default="build/ppo", help="model.zip, config.json, curve.csv/png go here")
    g.add_argument("--presets", type=_names, default=("edge-battery", "seed-200"), help="comma-separated")
    g.add_argument(
        "--loads", type=_floats, default=(1.0, 1.3, 1.6, 2.0), help="load factors, comma-separated"
    )
    g.add_argument("--physics-seeds", type=int, default=64, help="training physics seeds 1..N")
    g.add_argument("--nodes", type=int, default=12, help="each preset's fleet scaled to this many nodes")
    g.add_argument("--horizon", type=float, default=900.0, help="measured seconds per training episode")
    g.add_argument("--n-envs", type=int, default=2, help="rollout environments")
    g.add_argument(
        "--vec",
        choices=("subproc", "dummy", "ray"),
        default="subproc",
        help="where the environments run: local subprocesses, in-process, or Ray actors ([ray] extra)",
    )
    g.add_argument(
        "--ray-address",
        help="with --vec ray: the Ray cluster to join (e.g. auto, ray://head:10001); default a local Ray",
    )
    g.add_argument("--bc-decisions", type=int, default=20_000, help="heuristic decisions to clone (0: no BC)")
    g.add_argument("--max-wall", type=float, help="stop PPO once the run has taken this many seconds")
    g.add_argument(
        "--ent-decay-steps", type=int, help="steps over which the entropy bonus decays (default --timesteps)"
    )


def _ppo_eval_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--algo ppo")
    g.add_argument("--model", help="a `train --algo ppo` output directory")
    g.add_argument(
        "--placement-model", help="also evaluate this exported ONNX model (`export --algo ppo`) as onnx"
    )
    g.add_argument("--presets", type=_names, default=("edge-battery", "seed-200"), help="comma-separated")
    g.add_argument("--loads", type=_floats, default=(1.3, 2.0), help="load factors, comma-separated")
    # Defaults (None) are controlplane.learn.evaluate's, resolved at run time: parsing stays light.
    g.add_argument("--arrival-seeds", type=_ints, help="held-out arrival seeds (default 5151,6262)")
    g.add_argument("--physics-seeds", type=_ints, help="held-out physics seeds, paired (default 9191,7373)")
    g.add_argument("--horizon", type=float, default=3600.0, help="measured seconds per episode")
    g.add_argument("--nodes", type=int, default=12, help="each preset's fleet scaled to this many nodes")


def _say(message: str) -> None:
    print(f"[policy] {message}", file=sys.stderr, flush=True)


def _cached(path: Path, make: Any) -> Any:
    """``path`` (tagged with the feature schema version, so a schema or prior change never reuses
    rows drawn for the old one) if it exists, else ``make()`` saved there."""
    from edgeplane_contract.policy.features import FEATURE_SCHEMA_VERSION

    from controlplane.policy.samples import Samples

    path = path.with_name(f"{path.stem}-v{FEATURE_SCHEMA_VERSION}{path.suffix}")
    if path.exists():
        _say(f"using cached {path}")
        return Samples.load(str(path))
    started = time.perf_counter()
    samples = make()
    samples.save(str(path))
    _say(f"drew {len(samples)} rows in {time.perf_counter() - started:.1f} s -> {path}")
    return samples


def _held_out(n_seeds: int, keep_cases: bool = False) -> Any:
    from controlplane.policy.samples import EVAL_SEED_BASE, generate

    return generate(range(EVAL_SEED_BASE, EVAL_SEED_BASE + n_seeds), 1000, keep_cases=keep_cases)


def _train_ppo(args: argparse.Namespace) -> int:
    from controlplane.learn.curriculum import Curriculum
    from controlplane.learn.ppo import MissingTrainDeps, PPOConfig, require, train
    from controlplane.learn.ray_vec import MissingRay, require_ray

    try:
        require()
        if args.vec == "ray":
            require_ray()
        cfg = PPOConfig(
            seed=args.seed,
            timesteps=args.timesteps,
            n_envs=args.n_envs,
            vec=args.vec,
            ray_address=args.ray_address,
            bc_decisions=args.bc_decisions,
            max_wall_s=args.max_wall,
            ent_decay_steps=args.ent_decay_steps,
            curriculum=Curriculum(
                presets=args.presets,
                loads=args.loads,
                physics_seeds=tuple(range(1, args.physics_seeds + 1)),
                nodes=args.nodes,
                horizon_s=args.horizon,
            ),
        )
    except (MissingTrainDeps, MissingRay, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    train(cfg, Path(args.out), log=_say)
    return 0


def _eval_ppo(args: argparse.Namespace) -> int:
    from controlplane.learn.evaluate import (
        HELD_OUT_ARRIVAL_SEEDS,
        HELD_OUT_PHYSICS_SEEDS,
        evaluate,
        format_table,
        held_out_cases,
        heuristic,
    )
    from controlplane.learn.ppo import MissingTrainDeps, load_policy

    if not args.model:
        print("error: --model: give the directory `policy train --algo ppo` wrote", file=sys.stderr)
        return 2
    arrivals = args.arrival_seeds or HELD_OUT_ARRIVAL_SEEDS
    physics = args.physics_seeds or HELD_OUT_PHYSICS_SEEDS
    try:
        policy, cfg = load_policy(Path(args.model))
        cases = held_out_cases(
            args.presets,
            args.loads,
            arrivals,
            physics,
            horizon_s=args.horizon,
            nodes=args.nodes,
        )
        _check_held_out(cfg.curriculum, arrivals, physics)
    except (MissingTrainDeps, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    policies = {"heuristic": heuristic, "ppo": policy}
    if (Path(args.model) / "bc.zip").exists():
        # The cloned start: what PPO itself changed is ppo vs bc, not ppo vs heuristic.
        policies["bc"] = load_policy(Path(args.model), "bc")[0]
    if args.placement_model:
        from controlplane.learn.chooser import PlacementModelError, SlotObservationPolicy

        try:
            policies["onnx"] = SlotObservationPolicy(Path(args.placement_model))
        except PlacementModelError as exc:
            print(f"error: --placement-model: {exc}", file=sys.stderr)
            return 2
    result = evaluate(policies, cases, max_nodes=cfg.max_nodes, log=_say)
    result["model"] = str(args.model)
    result["training"] = {
        "arrival_seeds": list(cfg.curriculum.arrival_seeds),
        "physics_seeds": cfg.curriculum.describe()["physics_seeds"],
    }
    print(
        f"held out: arrival seeds {list(arrivals)}, physics seeds {list(physics)} (training drew "
        f"arrivals from [{cfg.curriculum.arrival_seeds[0]}, {cfg.curriculum.arrival_seeds[1]}), physics "
        f"seeds from {', '.join(f'[{a}, {b})' for a, b in result['training']['physics_seeds'])})"
    )
    print(format_table(result))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def _check_held_out(curriculum: Any, arrivals: tuple[int, ...], physics: tuple[int, ...]) -> None:
    """Evaluation seeds must be ones training never drew."""
    lo, hi = curriculum.arrival_seeds
    seen = [s for s in arrivals if lo <= s < hi]
    if seen:
        raise ValueError(f"--arrival-seeds: {seen[0]} is in the training range [{lo}, {hi})")
    seen = [s for s in physics if s in set(curriculum.physics_seeds)]
    if seen:
        raise ValueError(f"--physics-seeds: {seen[0]} was a training physics seed")


def _train(args: argparse.Namespace) -> int:
    if args.algo == "ppo":
        return _train_ppo(args)
    from controlplane.policy.samples import generate
    from controlplane.policy.train import TrainConfig, finetune, train

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cfg = TrainConfig(
        seed=args.seed,
        train_seeds=args.train_seeds,
        states_per_seed=args.states_per_seed,
        weights_per_state=args.weights_per_state,
        val_states=args.val_states,
        steps=args.steps,
        hidden=tuple(int(h) for h in args.hidden.split(",") if h),
        finetune_steps=args.finetune_steps,
        dp_epsilon=args.dp_epsilon,
    )
    data = _cached(
        work / f"train-{cfg.train_seeds}x{cfg.states_per_seed}x{cfg.weights_per_state}.npz",
        lambda: generate(
            range(cfg.train_seeds), cfg.states_per_seed, weights_per_state=cfg.weights_per_state
        ),
    )
    val = _cached(
        work / f"val-{cfg.val_seed_base}-{cfg.val_states}.npz",
        lambda: generate([cfg.val_seed_base], cfg.val_states),
    )
    model, report = train(cfg, data, val, log=_say)
    if cfg.finetune_steps:
        model, report["finetune"] = finetune(cfg, model, data, val, log=_say)
    model.save(str(work / "weights.npz"))
    (work / "train-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _say(f"wrote {work / 'weights.npz'} ({model.n_params()} parameters)")
    return 0


def _export_ppo(args: argparse.Namespace) -> int:
    from controlplane.learn.evaluate import held_out_cases
    from controlplane.learn.export import export
    from controlplane.learn.ppo import MissingTrainDeps

    if not args.model:
        print("error: --model: give the directory `policy train --algo ppo` wrote", file=sys.stderr)
        return 2
    try:
        # The checks run on the fleets and presets it was trained for, at held-out seeds.
        curriculum = json.loads((Path(args.model) / "config.json").read_text(encoding="utf-8"))
        curriculum = curriculum["config"]["curriculum"]
        cases = held_out_cases(
            tuple(curriculum["presets"]), (1.3, 2.0), horizon_s=args.check_horizon, nodes=curriculum["nodes"]
        )
        meta = export(Path(args.model), Path(args.out), cases, log=_say)
    except (MissingTrainDeps, ValueError, FileNotFoundError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    checks = meta["checks"]
    print(
        f"placement policy -> {args.out}: fp32 = trained on {checks['fp32_vs_trained']['identical']}/"
        f"{checks['fp32_vs_trained']['decisions']} decisions; int8 = fp32 on "
        f"{checks['int8_vs_fp32']['identical']}/{checks['int8_vs_fp32']['decisions']} "
        f"({100 * checks['int8_vs_fp32']['share']:.2f}%; with near-ties "
        f"{100 * checks['int8_vs_fp32']['near_share']:.2f}%)"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    if args.algo == "ppo":
        return _export_ppo(args)
    from controlplane.policy.evaluate import evaluate_policies
    from controlplane.policy.export import OPSET, export_onnx, node_names
    from controlplane.policy.quantize import (
        choose,
        measure,
        quantize_candidates,
        run_batch,
        session,
        write_metadata,
    )
    from controlplane.policy.samples import EVAL_SEED_BASE, generate
    from controlplane.policy.train import MLP

    work = Path(args.work_dir)
    model_dir = Path(args.model_dir)
    model = MLP.load(str(work / "weights.npz"))
    report = json.loads((work / "train-report.json").read_text(encoding="utf-8"))
    fp32 = export_onnx(model, work / "local_policy.fp32.onnx")
    # Calibration seeds sit between training (< 24 by default) and validation/evaluation seeds.
    calib = _cached(
        work / f"calib-{args.calibration_states}.npz",
        lambda: generate([5000], args.calibration_states, with_terms=False),
    )
    held = _cached(work / f"eval-{args.eval_seeds}.npz", lambda: _held_out(args.eval_seeds))
    candidates = quantize_candidates(fp32, work / "int8", calib.x, node_names(model)[0])
    ref, rows = measure(fp32, candidates, held)
    best = choose(rows)
    for row in rows:
        _say(
            f"{row['name']}: agreement with fp32 {100 * row['agreement_with_fp32']:.2f}%, "
            f"mean R {row['mean_reward']:.4f} (fp32 {ref['mean_reward']:.4f}), {row['bytes']} B, "
            f"bare p50 {row['bare_p50_us']:.1f} us"
        )
    _say(f"keeping {best['name']}")
    model_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(candidates[best["name"]], model_dir / "local_policy.int8.onnx")
    shutil.copyfile(fp32, model_dir / "local_policy.fp32.onnx")
    evaluation = evaluate_policies(
        held,
        {
            "learned-int8": run_batch(session(model_dir / "local_policy.int8.onnx"), held.x),
            "learned-fp32": run_batch(session(model_dir / "local_policy.fp32.onnx"), held.x),
        },
    )
    body = {
        "model": {
            "input": "features",
            "outputs": ["q", "logits"],
            "layers": list(model.sizes),
            "n_params": model.n_params(),
            "opset": OPSET,
            "quantization": {"chosen": best["name"], "fp32": ref, "candidates": rows},
        },
        "training": report,
        "evaluation": {
            "held_out_seeds": f"{EVAL_SEED_BASE}..{EVAL_SEED_BASE + args.eval_seeds - 1} x 1000 states "
            "(one weight draw each)",
            **evaluation,
        },
    }
    path = write_metadata(model_dir, body)
    _say(f"wrote {path}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    if args.algo == "ppo":
        return _eval_ppo(args)
    from controlplane.policy.evaluate import evaluate_policies, format_table
    from controlplane.policy.quantize import run_batch, session

    model_dir = Path(args.model_dir)
    held = _held_out(args.eval_seeds)
    learned = {}
    for name, file in (
        ("learned-int8", "local_policy.int8.onnx"),
        ("learned-fp32", "local_policy.fp32.onnx"),
    ):
        if (model_dir / file).exists():
            learned[name] = run_batch(session(model_dir / file), held.x)
    result = evaluate_policies(held, learned)
    if "learned-int8" in learned and "learned-fp32" in learned:
        from edgeplane_contract.policy.actions import select_from_logits

        from controlplane.policy.train import split_heads

        a8 = select_from_logits(split_heads(learned["learned-int8"])[1], held.mask)
        a32 = select_from_logits(split_heads(learned["learned-fp32"])[1], held.mask)
        result["int8_fp32_agreement"] = float((a8 == a32).mean())
    print(format_table(result))
    if "int8_fp32_agreement" in result:
        print(f"int8 vs fp32 agreement: {100 * result['int8_fp32_agreement']:.2f}%")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def run(args: argparse.Namespace) -> int:
    command = args.policy_command
    from controlplane.policies.client import VERBS

    if command in VERBS:
        from controlplane.commands.client_options import run_verb

        return run_verb(args, VERBS[command])
    from controlplane.policy import field_cli

    if command in field_cli.COMMANDS:
        return field_cli.run(args)
    if command == "train":
        return _train(args)
    if command == "export":
        return _export(args)
    if command == "bench":
        from controlplane.policy.bench import run as run_bench

        return run_bench(args)
    return _eval(args)
