"""Human output of a comparison: the table with ratios against ``default``, and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PlotUnavailable", "format_table", "write_plot"]

_ROWS = (
    ("mean_utilization", "mean utilisation (powered-on)", "pct"),
    ("p99_task_latency_s", "P99 task latency (s)", "num"),
    ("sla_violation_rate", "SLA violation rate", "pct"),
    ("mean_power_w", "mean power per node (W)", "num"),
    ("gpu_utilization", "GPU utilisation", "pct"),
    ("large_gpu_schedulability", "large-GPU schedulability", "pct"),
    ("decisions_per_s", "decisions/s", "num"),
    ("p99_decision_latency_ms", "p99 decision latency (ms)", "num"),
)


_BATTERY_ROWS = (
    ("battery_energy_kwh", "battery energy (kWh)", "num"),
    ("depleted_batteries", "depleted batteries", "int"),
)


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (it is the optional ``plot`` extra)."""


def _fmt(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return f"{int(value)}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def format_table(report: dict[str, Any]) -> str:
    """The metric table, one column per scheduler, then ratios against ``default``."""
    results = report["runs"]
    names = list(results)
    width = max(12, *(len(n) + 2 for n in names))
    lines = [
        f"preset {report['preset']}  seed {report['seed']}  {report['hours']:g} h  "
        f"{report.get('nodes', '?')} nodes  {report.get('tasks_measured', '?')} measured tasks",
        f"{'metric':32}" + "".join(f"{n:>{width}}" for n in names),
    ]
    for key, label, kind in _ROWS:
        lines.append(f"{label:32}" + "".join(f"{_fmt(results[n][key], kind):>{width}}" for n in names))
    if any(results[n].get("battery_nodes") for n in names):
        for key, label, kind in _BATTERY_ROWS:
            lines.append(f"{label:32}" + "".join(f"{_fmt(results[n][key], kind):>{width}}" for n in names))
    if "default" in results and len(names) > 1:
        base = results["default"]
        lines.append("")
        lines.append(f"{'ratio vs default':32}" + "".join(f"{n:>{width}}" for n in names))
        for key, label, _ in _ROWS:
            cells = []
            for n in names:
                den = base[key]
                cells.append(f"{results[n][key] / den:.2f}x" if den else "n/a")
            lines.append(f"{label:32}" + "".join(f"{c:>{width}}" for c in cells))
    return "\n".join(lines)


def write_plot(report: dict[str, Any], path: str | Path) -> None:
    """Bar charts of the headline metrics per scheduler (needs matplotlib, imported here)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(
            "--plot needs matplotlib, which is an optional extra: pip install 'edgeplane[plot]'"
        ) from None
    results = report["runs"]
    names = list(results)
    rows: tuple[tuple[str, str, str], ...] = _ROWS
    if any(results[n].get("battery_nodes") for n in names):
        rows = _ROWS + _BATTERY_ROWS
    fig, axes = plt.subplots(2, len(rows) // 2, figsize=(4 * len(rows) // 2, 7))
    colours = ["#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for ax, (key, label, kind) in zip(axes.flat, rows, strict=True):
        values = [results[n][key] * (100 if kind == "pct" else 1) for n in names]
        ax.bar(names, values, color=colours[: len(names)])
        ax.set_title(label + (" (%)" if kind == "pct" else ""), fontsize=10)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle(
        f"edgeplane simulate: preset {report['preset']}, seed {report['seed']}, {report['hours']:g} h"
    )
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
