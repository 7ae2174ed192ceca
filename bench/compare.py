"""Regression guard: the hot-path benches on a git ref and on the working tree, interleaved in one
run on this machine, with the ratio of each figure.

    python bench/compare.py REF [--rounds 2] [--quick] [--benches burst,functions,lifecycle] [--json F]

Checks REF out in a temporary ``git worktree`` and runs, round after round, each bench on REF then
on the working tree: ``bench/burst.py``, ``bench/functions_live.py`` and
``bench/lifecycle_latency.py``; with ``--benches heartbeat`` (or a list naming it) also
``bench/heartbeat_scale.py`` (2,000 impersonated agents, a few minutes: not by default). The bench
scripts are always this tree's (the same instrument on both sides); the code they measure is the
tree's they run in: each run is a subprocess with ``PYTHONPATH=<tree>`` and its cwd in that tree,
and the hub, ``controlplane up`` and the agents are started with ``sys.executable -m ...``, which
inherit that path (checked before the first round). Prints the median of each figure per side and
tree/REF; a hot path more than 20% worse is flagged SLOWER and the exit status is 1. The worktree
is removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
# A figure this much worse than REF's (in its bad direction) is a regression.
THRESHOLD = 1.20
PACKAGES = ("controlplane", "edge_agent", "edgeplane_contract")


@dataclass(frozen=True, slots=True)
class Metric:
    """One figure a bench writes to its JSON: where it is and which way is better."""

    name: str
    path: tuple[str | int, ...]  # keys, and indexes into lists
    higher_is_better: bool = False

    def read(self, report: dict[str, Any]) -> float:
        value: Any = report
        for key in self.path:
            value = value[key]
        if value is None:  # not reached in the run (e.g. a storm not absorbed in time): the worst
            return 0.0 if self.higher_is_better else float("inf")
        return float(value)


@dataclass(frozen=True, slots=True)
class Bench:
    """A bench script, its arguments (full and --quick) and the figures it is judged on."""

    name: str
    script: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    metrics: tuple[Metric, ...]
    optional: bool = False  # run only when named in --benches


BENCHES = (
    Bench(
        "burst",
        "burst.py",
        ("--workloads", "200", "--concurrency", "16", "--agents", "3"),
        ("--workloads", "20", "--concurrency", "4", "--agents", "1"),
        (
            Metric("burst: POSTs accepted (s)", ("accepted_s",)),
            Metric("burst: drained workloads/s", ("drained_per_s",), higher_is_better=True),
            Metric("burst: hub CPU ms/workload", ("hub_cpu_ms_per_workload",)),
            Metric("burst: agents' CPU ms/workload", ("agents_cpu_ms_per_workload",)),
        ),
    ),
    Bench(
        "functions",
        "functions_live.py",
        ("--agents", "2", "--warm", "100", "--cold", "5", "--seconds", "4", "--concurrency", "8"),
        ("--agents", "1", "--warm", "20", "--cold", "2", "--seconds", "1", "--concurrency", "4"),
        (
            Metric("functions: warm p50 (ms)", ("warm", "p50_ms")),
            Metric("functions: cold p50 (ms)", ("cold", "p50_ms")),
            Metric("functions: loaded p50 (ms)", ("loaded", "p50_ms")),
            Metric("functions: invocations/s", ("throughput", "invocations_per_s"), higher_is_better=True),
        ),
    ),
    Bench(
        "lifecycle",
        "lifecycle_latency.py",
        ("--agents", "3", "--workloads", "30"),
        ("--agents", "1", "--workloads", "5"),
        (
            Metric("lifecycle: POST->Running p50 (ms)", ("post_to_running_ms", "p50")),
            Metric("lifecycle: POST->Succeeded p50 (ms)", ("post_to_succeeded_observed_ms", "p50")),
        ),
    ),
    Bench(
        "heartbeat",
        "heartbeat_scale.py",
        ("--agents", "2000", "--seconds", "10", "--warmup", "3"),
        ("--agents", "50", "--seconds", "2", "--warmup", "1"),
        (
            Metric("heartbeat: hub CPU cores", ("runs", 0, "hub_cpu_cores")),
            Metric("heartbeat: hub CPU / bare subscriber's", ("runs", 0, "cpu_ratio")),
            Metric("heartbeat: hub µs/heartbeat", ("runs", 0, "hub_cpu_us_per_heartbeat")),
            Metric("heartbeat: registration storm (s)", ("runs", 0, "register_s")),
        ),
        optional=True,  # a few minutes of a fleet: named in --benches when the agent paths change
    ),
)


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that makes Python (and every ``sys.executable -m`` child) import ``tree``."""
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}


def check_imports(tree: Path) -> None:
    """Fail unless a subprocess with ``tree``'s environment imports the packages from ``tree``
    (an editable install's finder comes after PYTHONPATH; a plain install would not)."""
    probe = "import importlib, json; print(json.dumps([importlib.import_module(p).__file__ for p in %r]))"
    out = subprocess.run(
        [sys.executable, "-c", probe % (PACKAGES,)],
        cwd=tree, env=tree_env(tree), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    for file in json.loads(out.stdout):
        if not Path(file).resolve().is_relative_to(tree.resolve()):
            raise RuntimeError(f"with PYTHONPATH={tree} Python imports {file}, not the tree's code")


def run_bench(bench: Bench, tree: Path, quick: bool, out: Path, timeout_s: float) -> dict[str, float]:
    """One run of ``bench`` on ``tree``; its figures by metric name."""
    command = [sys.executable, str(BENCH / bench.script), *(bench.quick_args if quick else bench.args)]
    command += ["--json", str(out)]
    out.unlink(missing_ok=True)
    run = subprocess.run(
        command, cwd=tree, env=tree_env(tree), capture_output=True, text=True, timeout=timeout_s
    )
    if run.returncode != 0 or not out.exists():
        raise RuntimeError(
            f"{bench.script} on {tree} exited {run.returncode}:\n{(run.stdout + run.stderr)[-3000:]}"
        )
    report = json.loads(out.read_text())
    # functions_live names its loaded row after the concurrency: "loaded (c=8)".
    for key in list(report):
        if key.startswith("loaded"):
            report["loaded"] = report[key]
    return {metric.name: metric.read(report) for metric in bench.metrics}


def worse_by(metric: Metric, ref: float, tree: float) -> float:
    """How many times worse the tree's figure is than REF's (below 1: better)."""
    if metric.higher_is_better:
        return ref / tree if tree > 0 else float("inf")
    return tree / ref if ref > 0 else (1.0 if tree <= 0 else float("inf"))


def summarize(
    samples: dict[str, dict[str, list[float]]], metrics: list[Metric], threshold: float = THRESHOLD
) -> list[dict[str, Any]]:
    """One row per metric: the medians, tree/REF, and whether the tree is slower than allowed.
    ``samples`` is {"ref" | "tree": {metric name: [one value per round]}}."""
    rows = []
    for metric in metrics:
        ref = statistics.median(samples["ref"][metric.name])
        tree = statistics.median(samples["tree"][metric.name])
        worse = worse_by(metric, ref, tree)
        rows.append(
            {
                "metric": metric.name,
                "ref": ref,
                "tree": tree,
                "ratio": tree / ref if ref > 0 else float("inf"),
                "higher_is_better": metric.higher_is_better,
                "slower": worse > threshold,
                "ref_runs": samples["ref"][metric.name],
                "tree_runs": samples["tree"][metric.name],
            }
        )
    return rows


def table(rows: list[dict[str, Any]], ref_name: str) -> str:
    """The rows as a Markdown table."""
    lines = [
        f"| metric | {ref_name} median | tree median | tree/ref | |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        flag = "SLOWER" if row["slower"] else ""
        better = "higher is better" if row["higher_is_better"] else "lower is better"
        figures = f"{row['ref']:.2f} | {row['tree']:.2f} | {row['ratio']:.2f}x"
        lines.append(f"| {row['metric']} ({better}) | {figures} | {flag} |")
    return "\n".join(lines)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()


def compare(
    ref: str,
    rounds: int,
    quick: bool,
    benches: list[Bench],
    timeout_s: float,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Check ``ref`` out, run the rounds interleaved, remove the checkout; the report."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    scratch = Path(tempfile.mkdtemp(prefix="edgeplane-compare-"))
    ref_tree = scratch / "ref"
    samples: dict[str, dict[str, list[float]]] = {"ref": {}, "tree": {}}
    try:
        git("worktree", "add", "--detach", str(ref_tree), commit)
        trees = {"ref": ref_tree, "tree": REPO}
        for tree in trees.values():
            check_imports(tree)
        began = time.monotonic()
        for round_no in range(1, rounds + 1):
            for bench in benches:
                for side, tree in trees.items():  # REF, then the working tree, every time
                    log(f"round {round_no}/{rounds}: {bench.name} on {side} ({tree})")
                    figures = run_bench(bench, tree, quick, scratch / f"{bench.name}.json", timeout_s)
                    for name, value in figures.items():
                        samples[side].setdefault(name, []).append(value)
        elapsed = time.monotonic() - began
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=REPO, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
    rows = summarize(samples, [m for b in benches for m in b.metrics])
    return {
        "ref": ref,
        "ref_commit": commit,
        "rounds": rounds,
        "quick": quick,
        "threshold": THRESHOLD,
        "cores": os.cpu_count(),
        "elapsed_s": elapsed,
        "rows": rows,
        "slower": [row["metric"] for row in rows if row["slower"]],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("ref", help="git ref to compare the working tree against, e.g. HEAD or main")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each bench on each side (default 2)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the plumbing, not speed")
    parser.add_argument(
        "--benches",
        default=",".join(b.name for b in BENCHES if not b.optional),
        help=f"comma-separated subset of {', '.join(b.name for b in BENCHES)} (default: all but "
        f"{', '.join(b.name for b in BENCHES if b.optional)})",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one bench run may take")
    parser.add_argument("--json", help="write the table's figures to this file")
    args = parser.parse_args(argv)
    known = {b.name for b in BENCHES}
    chosen = [name.strip() for name in args.benches.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        parser.error(f"--benches: unknown {unknown or 'none given'}; expected some of {sorted(known)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.benches = [b for b in BENCHES if b.name in chosen]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = compare(args.ref, args.rounds, args.quick, args.benches, args.timeout)
    print(
        f"\n{args.ref} ({report['ref_commit'][:10]}) vs the working tree: {args.rounds} interleaved rounds, "
        f"{report['cores']} cores, {report['elapsed_s']:.0f} s, load average {os.getloadavg()[0]:.2f}"
    )
    print(table(report["rows"], args.ref))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if report["slower"]:
        print(f"SLOWER by more than {THRESHOLD - 1:.0%}: {', '.join(report['slower'])}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
