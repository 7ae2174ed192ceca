"""What the scheduler has learned: the interference estimate fitted from agents' observations,
and the SLA-miss risk counted from the same outcomes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from controlplane.scheduling.interference import InterferenceEstimate
from controlplane.scheduling.sla_risk import SHOWN_RATIO, SlaRiskTable

__all__ = ["Interference", "SlaRisk"]


@dataclass(frozen=True, slots=True)
class SlaRisk:
    """The SLA-miss risk learned from outcomes, as a reader can take it in."""

    at_ratio: Annotated[float, {"description": "the runtime ratio the risks are read at (1.5x expected)"}]
    by_load: Annotated[
        dict[str, list[float]],
        {
            "description": "by kind: the chance a replica runs longer than at_ratio times its expected "
            "runtime, per tenth of node load (0-0.1 first)"
        },
    ]
    observations: Annotated[dict[str, int], {"description": "completions counted, by kind"}]

    @classmethod
    def of(cls, table: SlaRiskTable) -> SlaRisk:
        by_load = {kind: [round(r, 4) for r in risk] for kind, risk in table.by_load(SHOWN_RATIO).items()}
        return cls(SHOWN_RATIO, by_load, dict(sorted(table.observations.items())))


@dataclass(frozen=True, slots=True)
class Interference:
    """``GET /v1/scheduler/interference``: the estimate the scores use (``learning`` false: the
    hub's profile keeps its prior, and the estimate fields are null or empty)."""

    learning: bool
    knee: Annotated[float | None, {"description": "CPU load above which work slows down"}]
    sensitivity: Annotated[dict[str, float], {"description": "slowdown at full load, by kind"}]
    sensitivity_sd: dict[str, float]
    io_penalty: float | None
    io_penalty_sd: float | None
    observations: Annotated[dict[str, int], {"description": "observations in the fit, by kind"}]
    reports: Annotated[
        dict[str, int],
        {"description": "what became of the observations successes carried since the hub started"},
    ]
    sla_risk: Annotated[
        SlaRisk | None,
        {"description": "the SLA-miss risk learned from the same outcomes (null: not weighed)"},
    ]

    @classmethod
    def of(
        cls,
        estimate: InterferenceEstimate | None,
        outcomes: Mapping[str, int],
        risk: SlaRiskTable | None = None,
    ) -> Interference:
        reports = dict(sorted(outcomes.items()))
        sla_risk = None if risk is None else SlaRisk.of(risk)
        if estimate is None:
            return cls(False, None, {}, {}, None, None, {}, reports, sla_risk)
        return cls(
            learning=True,
            knee=estimate.knee,
            sensitivity=dict(sorted(estimate.sensitivity.items())),
            sensitivity_sd=dict(sorted(estimate.sensitivity_sd.items())),
            io_penalty=estimate.io_penalty,
            io_penalty_sd=estimate.io_penalty_sd,
            observations=dict(sorted(estimate.observations.items())),
            reports=reports,
            sla_risk=sla_risk,
        )
