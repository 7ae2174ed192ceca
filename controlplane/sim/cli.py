"""``controlplane simulate``: run schedulers side by side on a preset and print the comparison."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["LEARNED_RUN", "configure", "run"]

LEARNED_RUN = "edgeplane-ppo"
CANARY_RUN = "edgeplane-canary"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        default="seed-200",
        help="scenario: seed-200, multi-cluster, edge-battery, mig-fragmentation",
    )
    parser.add_argument(
        "--schedulers",
        default=None,
        help="comma-separated scheduler (profile) names; default: battery-aware,fixed-weights on "
        "edge-battery, default,binpack,edgeplane elsewhere",
    )
    parser.add_argument("--hours", type=float, default=1.0, help="measured simulated hours (after warm-up)")
    parser.add_argument(
        "--seed", type=int, default=42, help="seed of the arrival sequence and all randomness"
    )
    parser.add_argument(
        "--physics-seed",
        type=int,
        default=None,
        help="seed of the hidden physics (interference, estimate error, power curves); "
        "default: the reference physics (seed 0), see docs/scheduling.md",
    )
    parser.add_argument(
        "--physics-family",
        choices=("knee", "convex-membw", "pairwise", "noisy-power"),
        default=None,
        help="force the hidden physics' functional form (default: the physics seed draws it; the "
        "reference seed 0 is knee), see docs/scheduling.md",
    )
    parser.add_argument("--nodes", type=int, default=None, help="scale the preset to about this many nodes")
    parser.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    parser.add_argument("--plot", default=None, help="write a PNG plot here (needs the 'plot' extra)")
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="register a profile YAML file as scheduler NAME (repeatable)",
    )
    parser.add_argument(
        "--placement-model",
        default=None,
        metavar="FILE",
        help="an exported PPO placement policy (ONNX, `policy export --algo ppo`): adds the run "
        f"{LEARNED_RUN!r}, the edgeplane profile with the model choosing each replica's node",
    )
    parser.add_argument(
        "--canary-model",
        default=None,
        metavar="FILE",
        help=f"a placement policy (ONNX, as --placement-model) rolled out as a canary: adds the run "
        f"{CANARY_RUN!r}, the edgeplane profile with a growing share of workloads placed by the model, "
        "promoted or rolled back by the anomaly-score controller (controlplane/rollout)",
    )
    parser.add_argument(
        "--canary-steps",
        default="0.05,0.25,0.5,1",
        help="the canary's share of new workloads, step by step (default 0.05,0.25,0.5,1)",
    )
    parser.add_argument("--canary-dwell", type=float, default=900.0, help="seconds per step (default 900)")
    parser.add_argument(
        "--canary-threshold", type=float, default=0.25, help="anomaly score that rolls back (default 0.25)"
    )
    parser.add_argument(
        "--canary-sustain",
        type=float,
        default=300.0,
        help="seconds the score must stay over the threshold to roll back (default 300)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--power-manager",
        choices=("on", "off", "both", "forecast"),
        default=None,
        help="run every scheduler with the power manager on, off, or both (columns NAME without "
        "it and NAME+pm with it), or on with its CPU reserve sized from a forecast of arriving "
        "CPU (forecast; docs/prediction.md); default: the preset's setting (on in every preset)",
    )
    parser.add_argument(
        "--load",
        type=float,
        default=1.0,
        help="scale the preset's offered load: every class's arrival rate times this (mix kept)",
    )
    parser.add_argument(
        "--trace",
        choices=["azure-vm"],
        default=None,
        help="replay a trace instead of a preset: azure-vm (Azure VM trace 2017, needs --trace-dir); "
        "--hours caps the replay, --nodes sizes the fleet (default: peak offered CPU at 80%%)",
    )
    parser.add_argument(
        "--trace-dir", default=None, help="the trace's folder (v1.<split>.txt, flav_map.txt, ...)"
    )
    parser.add_argument("--split", default="dev", help="the trace split to replay (v1.<split>.txt)")


def progress_line(t: float, window: tuple[float, float]) -> str:
    """Where a run is, in the hours the user asked for: warm-up, the measured window, then the
    drain (work still running when arrivals stop), past the window rather than beyond 100 %."""
    start, end = window
    hours = (end - start) / 3600
    if t < start:
        return f"warming up ({t / 3600:.1f}/{start / 3600:.1f} h)"
    if t <= end:
        return f"simulated {(t - start) / 3600:.1f}/{hours:g} h"
    return f"simulated {hours:g}/{hours:g} h, draining the work still running (+{(t - end) / 3600:.1f} h)"


def _progress(quiet: bool) -> Callable[[str, float, tuple[float, float]], None]:
    """What a run reports as it goes: one stderr line per progress call, with the wall clock
    since this was made (nothing when ``quiet``)."""
    started = time.perf_counter()

    def progress(name: str, t: float, window: tuple[float, float]) -> None:
        if not quiet:
            print(
                f"  [{name}] {progress_line(t, window)} ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    return progress


def _fail(message: str) -> int:
    print(f"controlplane simulate: error: {message}", file=sys.stderr)
    return 2


def _run_trace(args: argparse.Namespace, names: list[str]) -> int:
    """``--trace azure-vm``: replay the Azure VM trace (controlplane/sim/vmreplay.py)."""
    from controlplane.sim.vmreplay import format_trace_table, run_trace_comparison
    from controlplane.sim.vmtrace import TraceFormatError, load_vm_trace

    if args.trace_dir is None:
        return _fail(f"--trace {args.trace} needs --trace-dir DIR")
    if args.plot:
        return _fail("--plot does not apply to --trace (the table and --json carry the results)")
    if args.load != 1.0:
        return _fail(
            "--load does not apply to --trace: the trace's arrivals are its load; size the fleet with --nodes"
        )
    if args.physics_seed is not None:  # contention is off in the replay: VM lifetimes never stretch
        return _fail("--physics-seed does not apply to --trace: the replay has no contention physics to draw")
    if args.physics_family is not None:
        return _fail(
            "--physics-family does not apply to --trace: the replay has no contention physics to draw"
        )
    try:
        trace = load_vm_trace(args.trace_dir, split=args.split, hours=args.hours)
    except TraceFormatError as exc:
        return _fail(f"bad trace: {exc}")
    progress = _progress(args.quiet)

    if not args.quiet:
        print(
            f"replaying {len(trace.vms)} VMs ({trace.hours:g} h of split {args.split}) ...", file=sys.stderr
        )
    report = run_trace_comparison(
        trace,
        schedulers=names,
        seed=args.seed,
        nodes=args.nodes,
        progress=progress,
        power_manager=args.power_manager,
    )
    print(format_trace_table(report))
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def run(args: argparse.Namespace) -> int:
    from controlplane.errors import ConfigError
    from controlplane.scheduling.profiles import load_profile
    from controlplane.sim.battery import format_battery_comparison
    from controlplane.sim.presets import PRESETS
    from controlplane.sim.report import PlotUnavailable, format_table, write_plot
    from controlplane.sim.runner import SCHEDULERS, default_schedulers, register_scheduler, run_comparison

    if args.preset not in PRESETS:
        return _fail(f"unknown preset {args.preset!r} (known: {', '.join(PRESETS)})")
    if not args.hours > 0 or args.hours != args.hours:
        return _fail(f"--hours must be a positive number, got {args.hours}")
    if args.nodes is not None and args.nodes <= 0:
        return _fail(f"--nodes must be a positive integer, got {args.nodes}")
    if not args.load > 0 or args.load == float("inf"):
        return _fail(f"--load must be a positive number, got {args.load}")
    for item in args.profile:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            return _fail(f"--profile takes NAME=FILE, got {item!r}")
        try:
            load_profile(path)
        except ConfigError as exc:
            return _fail(str(exc))
        register_scheduler(name, path)
    choosers: dict[str, Callable[[Any], Any]] = {}
    if args.placement_model is not None:
        from controlplane.learn.chooser import LearnedChooser, PlacementModelError, load_session

        model = Path(args.placement_model)
        try:
            load_session(model)  # refused now, with its reason, not after the first runs
        except PlacementModelError as exc:
            return _fail(f"--placement-model: {exc}")
        register_scheduler(LEARNED_RUN, "edgeplane")
        choosers[LEARNED_RUN] = lambda sched: LearnedChooser(model).attach(sched)
    if args.canary_model is not None:
        canary = _canary(args)
        if isinstance(canary, str):
            return _fail(canary)
        register_scheduler(CANARY_RUN, "edgeplane")
        choosers[CANARY_RUN] = canary
    if args.schedulers is None:
        names = default_schedulers(args.preset)
    else:
        names = [n.strip() for n in args.schedulers.split(",") if n.strip()]
    for run in choosers:
        if run not in names:
            names.append(run)
    if not names:
        return _fail("--schedulers is empty")
    unknown = [n for n in names if n not in SCHEDULERS]
    if unknown:
        return _fail(f"unknown scheduler {unknown[0]!r} (known: {', '.join(SCHEDULERS)})")
    if len(set(names)) != len(names):
        return _fail("--schedulers lists a name twice")
    # Load every profile before the first run, so a broken one (say, a learned policy whose
    # model file is missing) fails now with its reason, not hours into the comparison.
    for name in names:
        profile = SCHEDULERS[name]
        try:
            load_profile(dict(profile) if isinstance(profile, Mapping) else profile)
        except ConfigError as exc:
            return _fail(f"scheduler {name!r}: {exc}")
    if args.trace is not None:
        if choosers:
            return _fail("--placement-model and --canary-model do not apply to --trace yet: use a --preset")
        return _run_trace(args, names)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        return _fail("--plot needs matplotlib, which is an optional extra: pip install 'edgeplane[plot]'")

    started = time.perf_counter()
    progress = _progress(args.quiet)

    if not args.quiet:
        print(f"simulating {', '.join(names)} on {args.preset} for {args.hours:g} h ...", file=sys.stderr)
    report = run_comparison(
        preset=args.preset,
        schedulers=names,
        hours=args.hours,
        seed=args.seed,
        nodes=args.nodes,
        progress=progress,
        physics_seed=args.physics_seed,
        physics_family=args.physics_family,
        power_manager=args.power_manager,
        load=args.load,
        choosers=choosers,
    )
    print(format_table(report))
    canary_report = report["runs"].get(CANARY_RUN, {}).get("chooser")
    if canary_report is not None:
        print()
        print(format_canary(canary_report))
    if "battery_comparison" in report:
        print()
        print(format_battery_comparison(report["battery_comparison"], report["runs"]))
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(
            json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8"
        )
    if args.plot:
        try:
            write_plot(report, args.plot)
        except PlotUnavailable as exc:
            return _fail(str(exc))
    if not args.quiet:
        print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _canary(args: argparse.Namespace) -> Callable[[Any], Any] | str:
    """The canary run's chooser factory, or what is wrong with the options (one line)."""
    from controlplane.learn.chooser import LearnedChooser, PlacementModelError, load_session
    from controlplane.rollout import CanaryChooser, CanaryController, RolloutConfig

    model = Path(args.canary_model)
    try:
        load_session(model)
    except PlacementModelError as exc:
        return f"--canary-model: {exc}"
    try:
        steps = tuple(float(x) for x in args.canary_steps.split(",") if x.strip())
        config = RolloutConfig(
            steps=steps,
            dwell_s=args.canary_dwell,
            threshold=args.canary_threshold,
            sustain_s=args.canary_sustain,
        )
    except ValueError as exc:
        return f"--canary-steps/--canary-dwell/--canary-threshold/--canary-sustain: {exc}"

    def attach(sched: Any) -> Any:
        return CanaryChooser(LearnedChooser(model), CanaryController(config)).attach(sched)

    return attach


def format_canary(described: Mapping[str, Any]) -> str:
    """The canary's timeline, a line per decision."""
    decisions = described.get("decisions", {})
    lines = [
        f"canary: {described['state']} (placements: {decisions.get('canary', 0)} canary, "
        f"{decisions.get('control', 0)} control)"
    ]
    for e in described["events"]:
        base = "-" if e["baseline"] is None else f"{e['baseline']:.3f}"
        lines.append(
            f"  t={e['t_s']:>8.0f} s  {e['kind']:<8} share {e['fraction']:>4.0%}  canary score "
            f"{e['canary_score']:.2f}  control score {e['control_score']:.2f}  baseline {base}  {e['reason']}"
        )
    return "\n".join(lines)
