"""``controlplane simulate-functions``: compare keep-alive policies on a function trace.

Prints one row per policy (and ratios against ``fixed-10m``), writes the metrics as JSON and,
optionally, plots cold-start rate of the 75th-percentile function against wasted memory-time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["configure", "run"]

_DEFAULT_POLICIES = "fixed-10m,no-keepalive,hybrid,edgeplane"
_BASELINE = "fixed-10m"
_CREDIT = (
    "Azure Functions Trace 2019 (Microsoft Azure Public Dataset; Shahrad et al., "
    '"Serverless in the Wild", USENIX ATC 2020), CC-BY 4.0'
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the subcommand's arguments."""
    parser.add_argument("--trace", choices=("synthetic", "azure"), required=True, help="workload source")
    parser.add_argument(
        "--trace-dir", type=Path, help="Azure trace directory (either layout); for --trace azure"
    )
    parser.add_argument("--day", type=int, default=1, help="day file of the original layout (default 1)")
    parser.add_argument("--functions", type=int, help="number of functions (synthetic: 200; azure: all)")
    parser.add_argument("--hours", type=float, help="hours to simulate (synthetic: 24; azure: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed for generation and sub-minute spreading")
    parser.add_argument(
        "--spread",
        choices=("uniform", "equidistant"),
        default="uniform",
        help="how an Azure minute's invocations are placed within it (default uniform)",
    )
    parser.add_argument(
        "--policies", default=_DEFAULT_POLICIES, help=f"comma-separated (default {_DEFAULT_POLICIES})"
    )
    parser.add_argument(
        "--cold-start-base-ms", type=float, default=500.0, help="cold-start latency, fixed part"
    )
    parser.add_argument(
        "--cold-start-ms-per-gb", type=float, default=1000.0, help="cold-start latency per GB"
    )
    parser.add_argument("--json", type=Path, help="write the metrics here")
    parser.add_argument("--plot", type=Path, help="write a PNG of p75-function cold starts vs wasted memory")


def _fail(message: str) -> int:
    print(f"controlplane simulate-functions: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the comparison; returns the exit status (2 on bad input)."""
    from controlplane.predict import PredictDependencyError
    from controlplane.serverless.funcsim import ColdStartModel, SimulationResult, simulate
    from controlplane.serverless.keepalive import POLICY_NAMES, Policy, make_policy
    from controlplane.serverless.synthetic import SyntheticConfig, generate_workload
    from controlplane.serverless.traces import TraceFormatError, load_azure_trace

    policies = [p.strip() for p in str(args.policies).split(",") if p.strip()]
    if not policies:
        return _fail("--policies is empty")
    for p in policies:
        if p not in POLICY_NAMES:
            return _fail(f"unknown policy {p!r} in --policies (known: {', '.join(POLICY_NAMES)})")
    built: dict[str, Policy] = {}
    for p in policies:
        try:  # before the trace loads: a policy missing its optional dependency fails at once
            built[p] = make_policy(p)
        except PredictDependencyError as exc:
            return _fail(f"policy {p!r}: {exc}")
    if args.functions is not None and args.functions < 1:
        return _fail("--functions must be >= 1")
    if args.hours is not None and args.hours <= 0:
        return _fail("--hours must be > 0")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _fail("--plot needs matplotlib: pip install 'edgeplane[plot]'")

    trace_info: dict[str, Any] = {"kind": args.trace, "seed": args.seed}
    if args.trace == "azure":
        if args.trace_dir is None:
            return _fail("--trace azure needs --trace-dir DIR")
        if not args.trace_dir.is_dir():
            return _fail(f"trace directory {str(args.trace_dir)!r} does not exist")
        try:
            trace = load_azure_trace(args.trace_dir, day=args.day, functions=args.functions, hours=args.hours)
        except TraceFormatError as exc:
            return _fail(f"bad trace: {exc}")
        workload = trace.to_workload(seed=args.seed, spread=args.spread)
        trace_info.update(
            dir=str(args.trace_dir),
            layout=trace.layout,
            spread=args.spread,
            missing_durations=trace.missing_durations,
            missing_memory=trace.missing_memory,
            credit=_CREDIT,
        )
    else:
        cfg = SyntheticConfig(
            functions=args.functions if args.functions is not None else 200,
            hours=args.hours if args.hours is not None else 24.0,
        )
        workload = generate_workload(cfg, seed=args.seed)
    trace_info.update(
        name=workload.name,
        functions=len(workload.functions),
        invocations=workload.invocations,
        horizon_s=workload.horizon_s,
    )
    cold = ColdStartModel(
        base_s=args.cold_start_base_ms / 1000.0, per_gb_s=args.cold_start_ms_per_gb / 1000.0
    )
    print(
        f"trace {workload.name}: {len(workload.functions)} functions, {workload.invocations:,} invocations, "
        f"{workload.horizon_s / 3600:.1f} h",
        flush=True,
    )

    results: dict[str, SimulationResult] = {}
    for name in policies:
        results[name] = simulate(workload, built[name], cold_start=cold)
        r = results[name]
        # Progress, not a result: stderr, so that stdout holds the trace line and the tables only.
        print(f"  simulated {name} in {r.wall_s:.1f} s", file=sys.stderr, flush=True)

    print(_table(results))
    ratios = _ratios(results)
    if ratios:
        print(_ratio_table(ratios))
    doc: dict[str, Any] = {
        "trace": trace_info,
        "cold_start_model": {"base_ms": args.cold_start_base_ms, "ms_per_gb": args.cold_start_ms_per_gb},
        "policies": {name: r.summary() for name, r in results.items()},
        "ratios_vs_fixed_10m": ratios,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if args.plot is not None:
        _plot(results, args.plot, title=workload.name)
    return 0


def _table(results: dict[str, Any]) -> str:
    w = max(24, 2 + max(map(len, results), default=0))  # the longest policy name fits
    head = f"{'policy':<{w}}{'cold %':>9}{'p75 fn cold %':>15}{'wasted GB-s':>16}{'p50 ms':>10}{'p99 ms':>11}"
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        lines.append(
            f"{name:<{w}}{100 * r.cold_start_rate:>9.2f}{100 * r.cold_start_rate_p75_function:>15.2f}"
            f"{r.wasted_memory_gb_s:>16,.0f}{r.p50_latency_ms:>10.0f}{r.p99_latency_ms:>11.0f}"
        )
    return "\n".join(lines)


def _ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    base = results.get(_BASELINE)
    if base is None:
        return {}

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        name: {
            "cold_start_rate": ratio(r.cold_start_rate, base.cold_start_rate),
            "cold_start_rate_p75_function": ratio(
                r.cold_start_rate_p75_function, base.cold_start_rate_p75_function
            ),
            "wasted_memory_gb_s": ratio(r.wasted_memory_gb_s, base.wasted_memory_gb_s),
        }
        for name, r in results.items()
    }


def _ratio_table(ratios: dict[str, dict[str, float | None]]) -> str:
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    w = max(24, 2 + max(map(len, ratios), default=0))
    head = f"{'vs ' + _BASELINE:<{w}}{'cold':>9}{'p75 fn cold':>15}{'wasted mem':>16}"
    lines = [head, "-" * len(head)]
    for name, r in ratios.items():
        lines.append(
            f"{name:<{w}}{fmt(r['cold_start_rate']):>9}{fmt(r['cold_start_rate_p75_function']):>15}"
            f"{fmt(r['wasted_memory_gb_s']):>16}"
        )
    return "\n".join(lines)


def _plot(results: dict[str, Any], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (name, r) in enumerate(results.items()):
        ax.scatter(
            [r.wasted_memory_gb_s / 1e6],
            [100 * r.cold_start_rate_p75_function],
            s=55,
            marker="os^Dv<>p"[i % 8],
            label=name,
            zorder=3,
        )
    base = results.get(_BASELINE)
    if base is not None:
        # The target region: at most half the baseline's p75 cold starts, at most its memory.
        ax.axhline(50 * base.cold_start_rate_p75_function, color="grey", ls=":", lw=1)
        ax.axvline(base.wasted_memory_gb_s / 1e6, color="grey", ls=":", lw=1)
    ax.set_xlabel("wasted memory-time (million GB-s)")
    ax.set_ylabel("cold-start rate of the 75th-percentile function (%)")
    ax.set_title(f"{title} (dotted: half of {_BASELINE}'s p75, {_BASELINE}'s memory)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(-2, 125)
    ax.set_xlim(left=-0.02 * max(1e-9, max(r.wasted_memory_gb_s / 1e6 for r in results.values())))
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
