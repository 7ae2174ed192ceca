"""Human output of a comparison: the table with ratios against ``default``, and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PlotUnavailable", "format_cell", "format_table", "write_plot"]

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


# The fair score sheet (metrics.py): work served rather than stretched occupancy, energy, and
# per kind of work the latency, queueing and SLA figures that aggregate ones hide.
_SCORE_ROWS = (
    ("offered_utilization", "offered load (of all nodes' CPU)", "pct"),
    ("served_utilization", "served utilisation (all nodes)", "pct"),
    ("served_utilization_powered_on", "served utilisation (powered-on)", "pct"),
    ("cpu_utilization_all_nodes", "stretched CPU util. (all nodes)", "pct"),
    ("energy_kwh", "energy (kWh)", "num"),
    ("energy_per_served_cpu_hour_wh", "energy per served vCPU-hour (Wh)", "num"),
)
# Shown when large MIG requests were classed at arrival (controlplane/sim/migfit.py).
_MIG_ROWS = (
    ("large_gpu_started_at_arrival", "large-GPU started at arrival", "pct"),
    ("large_gpu_fragmented_arrivals", "large MIG arrivals fragmented", "int"),
    ("large_gpu_schedulability_fragmented", "large-GPU sched. (fragmented)", "pct"),
    ("fragment_merges", "fragment merges (moves)", "int"),
    ("preemptions", "preemptions", "int"),
)
_KIND_ROWS = (
    ("p99_latency_s", "P99 latency (s)", "num"),
    ("p99_queue_s", "P99 queueing (s)", "num"),
    ("sla_violation_rate", "SLA violation rate", "pct"),
)


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (it is the optional ``plot`` extra)."""


def format_cell(value: float | None, kind: str) -> str:
    """One table cell: ``pct`` (a share, one decimal), ``pct2`` (two decimals, where shares
    near 100% differ in the second), ``int``, ``count`` (an integer with thousands separators),
    ``num`` (one decimal from 10 up, else two); None is ``n/a``."""
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "pct2":
        return f"{100 * value:.2f}%"
    if kind == "int":
        return f"{int(value)}"
    if kind == "count":
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def format_table(report: dict[str, Any]) -> str:
    """The metric table, one column per scheduler, then ratios against ``default``."""
    results = report["runs"]
    names = list(results)
    width = max(12, *(len(n) + 2 for n in names))
    header = (
        f"preset {report['preset']}  seed {report['seed']}  {report['hours']:g} h  "
        f"{report.get('nodes', '?')} nodes  {report.get('tasks_measured', '?')} measured tasks"
    )
    if report.get("load", 1.0) != 1.0:
        header += f"  load x{report['load']:g}"
    if report.get("power_manager", "on") != "on":
        header += f"  power manager {report['power_manager']}"
    lines = [header, f"{'metric':32}" + "".join(f"{n:>{width}}" for n in names)]
    for key, label, kind in _ROWS:
        lines.append(f"{label:32}" + "".join(f"{format_cell(results[n][key], kind):>{width}}" for n in names))
    if any(results[n].get("battery_nodes") for n in names):
        for key, label, kind in _BATTERY_ROWS:
            lines.append(
                f"{label:32}" + "".join(f"{format_cell(results[n][key], kind):>{width}}" for n in names)
            )
    if any(results[n].get("large_gpu_mig_arrivals") for n in names):
        for key, label, kind in _MIG_ROWS:
            mig_cells = "".join(f"{format_cell(results[n].get(key), kind):>{width}}" for n in names)
            lines.append(f"{label:32}" + mig_cells)
    lines.extend(_score_sheet(results, names, width))
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


def _score_sheet(results: dict[str, Any], names: list[str], width: int) -> list[str]:
    """The fair score sheet's rows (absent from reports written before it)."""
    if not all("served_utilization" in results[n] for n in names):
        return []

    def row(label: str, cells: list[str]) -> str:
        return f"{label:32}" + "".join(f"{c:>{width}}" for c in cells)

    lines = ["", row("score sheet", names)]
    lines.append(row("power manager", ["on" if results[n]["power_manager"] else "off" for n in names]))
    for key, label, kind in _SCORE_ROWS:
        # n/a where a report predates the row (energy per served vCPU-hour came later).
        lines.append(row(label, [format_cell(results[n].get(key), kind) for n in names]))
    kinds = sorted({k for n in names for k in results[n].get("by_kind", {})})
    for k in kinds:
        for key, label, kind in _KIND_ROWS:
            cells = [format_cell(results[n]["by_kind"].get(k, {}).get(key), kind) for n in names]
            lines.append(row(f"{k}: {label}", cells))
    return lines


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
