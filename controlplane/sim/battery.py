"""Battery-aware weighting against fixed weights: the comparison and its targets.

``controlplane simulate --preset edge-battery`` runs the ``battery-aware`` scheduler (the
``edgeplane`` profile: w3 rises on battery, more as the charge falls, and a node on battery is
suspended first and woken last) and ``fixed-weights`` (the same profile with the adaptive rule
off) on the same arrivals. This module reads the two runs of a report and checks the targets:
at least 30% less energy drawn from batteries, fewer depleted batteries, and an SLA violation
rate at most 1 point higher.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADAPTIVE", "FIXED", "battery_comparison", "format_battery_comparison"]

ADAPTIVE = "battery-aware"
FIXED = "fixed-weights"
ENERGY_REDUCTION_TARGET = 0.30
SLA_TOLERANCE = 0.01


def battery_comparison(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The comparison of the two runs, or None unless both ran on a fleet with batteries."""
    aware, fixed = runs.get(ADAPTIVE), runs.get(FIXED)
    if aware is None or fixed is None or not fixed.get("battery_nodes"):
        return None
    e_aware, e_fixed = aware["battery_energy_kwh"], fixed["battery_energy_kwh"]
    reduction = 1.0 - e_aware / e_fixed if e_fixed > 0 else 0.0
    sla_delta = aware["sla_violation_rate"] - fixed["sla_violation_rate"]
    targets = {
        "battery_energy_at_least_30pct_lower": reduction >= ENERGY_REDUCTION_TARGET,
        "fewer_depleted_batteries": aware["depleted_batteries"] < fixed["depleted_batteries"],
        "sla_at_most_1pt_higher": sla_delta <= SLA_TOLERANCE,
    }
    return {
        "battery_energy_ratio": e_aware / e_fixed if e_fixed > 0 else None,
        "battery_energy_reduction": reduction,
        "depleted_batteries": {ADAPTIVE: aware["depleted_batteries"], FIXED: fixed["depleted_batteries"]},
        "sla_violation_delta": sla_delta,
        "targets": targets,
        "all_targets_met": all(targets.values()),
    }


def format_battery_comparison(comparison: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    """A short table: the battery figures of both runs and whether each target is met."""
    aware, fixed = runs[ADAPTIVE], runs[FIXED]
    t = comparison["targets"]

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    rows = [
        f"{'battery-aware vs fixed weights':34}{ADAPTIVE:>15}{FIXED:>15}   target",
        f"{'battery energy (kWh)':34}{aware['battery_energy_kwh']:>15.3f}{fixed['battery_energy_kwh']:>15.3f}"
        f"   >= 30% lower: {100 * comparison['battery_energy_reduction']:.1f}% lower, "
        f"{mark(t['battery_energy_at_least_30pct_lower'])}",
        f"{'depleted batteries':34}{aware['depleted_batteries']:>15d}{fixed['depleted_batteries']:>15d}"
        f"   fewer: {mark(t['fewer_depleted_batteries'])}",
        f"{'SLA violation rate':34}{100 * aware['sla_violation_rate']:>14.2f}%"
        f"{100 * fixed['sla_violation_rate']:>14.2f}%"
        f"   <= +1 pt: {100 * comparison['sla_violation_delta']:+.2f} pt, "
        f"{mark(t['sla_at_most_1pt_higher'])}",
        f"{'lowest battery level':34}{aware['min_battery_percent']:>14.1f}%"
        f"{fixed['min_battery_percent']:>14.1f}%",
    ]
    return "\n".join(rows)
