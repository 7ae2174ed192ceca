"""Mean of several ``controlplane simulate --json`` reports (one per seed), with ratios.

    for s in 201 202 203; do
      controlplane simulate --preset edge-battery --hours 24 --seed $s \\
          --schedulers default,binpack,edgeplane,edgeplane-learned --json runs/eb-$s.json
    done
    python bench/summarize_runs.py runs/eb-*.json --against edgeplane [--json OUT] [--plot OUT.png]

Prints, per scheduler, each metric's mean over the reports (and its per-seed values), then the
ratio of the means to the ``--against`` scheduler. All reports must come from the same preset and
hours, with the same schedulers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

METRICS = (
    ("mean_utilization", "mean utilisation", "pct"),
    ("p99_task_latency_s", "P99 task latency (s)", "num"),
    ("sla_violation_rate", "SLA violation rate", "pct2"),
    ("mean_power_w", "mean power per node (W)", "num"),
    ("gpu_utilization", "GPU utilisation", "pct"),
    ("large_gpu_schedulability", "large-GPU schedulability", "pct"),
    ("battery_energy_kwh", "battery energy (kWh)", "num3"),
    ("depleted_batteries", "depleted batteries", "num"),
    ("decisions_per_s", "decisions/s", "num"),
    ("p99_decision_latency_ms", "p99 decision latency (ms)", "num"),
)


def _fmt(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "pct2":
        return f"{100 * value:.2f}%"
    if kind == "num3":
        return f"{value:.3f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def summarize(reports: list[dict[str, Any]], against: str) -> dict[str, Any]:
    """Means, per-seed values and ratios of the means to ``against``."""
    first = reports[0]
    names = list(first["runs"])
    for r in reports[1:]:
        if (r["preset"], r["hours"], list(r["runs"])) != (first["preset"], first["hours"], names):
            raise ValueError("reports differ in preset, hours or schedulers")
    if against not in names:
        raise ValueError(f"--against {against!r} is not among the schedulers ({', '.join(names)})")
    metrics = [m for m in METRICS if all(m[0] in r["runs"][n] for r in reports for n in names)]
    if not first["runs"][names[0]].get("battery_nodes"):
        metrics = [m for m in metrics if m[0] not in ("battery_energy_kwh", "depleted_batteries")]
    if not any(r["runs"][n].get("gpu_utilization") for r in reports for n in names):
        metrics = [m for m in metrics if m[0] not in ("gpu_utilization", "large_gpu_schedulability")]
    table: dict[str, dict[str, Any]] = {}
    for name in names:
        table[name] = {}
        for key, _, _ in metrics:
            values = [float(r["runs"][name][key]) for r in reports]
            table[name][key] = {"mean": sum(values) / len(values), "seeds": values}
    ratios = {
        name: {
            key: (table[name][key]["mean"] / table[against][key]["mean"])
            if table[against][key]["mean"]
            else None
            for key, _, _ in metrics
        }
        for name in names
    }
    return {
        "preset": first["preset"],
        "hours": first["hours"],
        "seeds": [r["seed"] for r in reports],
        "against": against,
        "metrics": [m[0] for m in metrics],
        "means": table,
        "ratios": ratios,
    }


def format_summary(summary: dict[str, Any]) -> str:
    names = list(summary["means"])
    width = max(14, *(len(n) + 2 for n in names))
    rows = [
        f"preset {summary['preset']}, {summary['hours']:g} h, seeds {', '.join(map(str, summary['seeds']))}: "
        f"mean over seeds",
        f"{'metric':28}" + "".join(f"{n:>{width}}" for n in names),
    ]
    kinds = {key: kind for key, _, kind in METRICS}
    labels = {key: label for key, label, _ in METRICS}
    for key in summary["metrics"]:
        cells = "".join(f"{_fmt(summary['means'][n][key]['mean'], kinds[key]):>{width}}" for n in names)
        rows.append(f"{labels[key]:28}{cells}")
    rows.append("")
    rows.append(f"{'ratio vs ' + summary['against']:28}" + "".join(f"{n:>{width}}" for n in names))
    for key in summary["metrics"]:
        cells = []
        for n in names:
            r = summary["ratios"][n][key]
            cells.append(f"{r:.2f}x" if r is not None else "n/a")
        rows.append(f"{labels[key]:28}" + "".join(f"{c:>{width}}" for c in cells))
    rows.append("")
    rows.append("per seed:")
    for key in summary["metrics"]:
        for n in names:
            values = ", ".join(_fmt(v, kinds[key]) for v in summary["means"][n][key]["seeds"])
            rows.append(f"  {labels[key]:28}{n:>{width}}: {values}")
    return "\n".join(rows)


def write_plot(summary: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = summary["metrics"]
    names = list(summary["means"])
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.6))
    for ax, key in zip(axes, keys, strict=True):
        means = [summary["means"][n][key]["mean"] for n in names]
        ax.bar(names, means, color=["#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"][: len(names)])
        ax.set_title(dict((k, lbl) for k, lbl, _ in METRICS)[key], fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.suptitle(f"{summary['preset']}, {summary['hours']:g} h, seeds {summary['seeds']} (means)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="controlplane simulate --json files, one per seed")
    parser.add_argument("--against", default="edgeplane", help="scheduler the ratios divide by")
    parser.add_argument("--json", dest="json_path", help="write the summary here")
    parser.add_argument("--plot", help="write a bar chart of the means here (matplotlib)")
    args = parser.parse_args(argv)
    try:
        reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.reports]
        summary = summarize(reports, args.against)
    except (OSError, ValueError, KeyError) as exc:
        print(f"summarize_runs: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if args.plot:
        write_plot(summary, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
