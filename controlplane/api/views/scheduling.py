"""What the scheduler has learned: the interference estimate fitted from agents' observations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from controlplane.scheduling.interference import InterferenceEstimate

__all__ = ["Interference"]


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

    @classmethod
    def of(cls, estimate: InterferenceEstimate | None, outcomes: Mapping[str, int]) -> Interference:
        reports = dict(sorted(outcomes.items()))
        if estimate is None:
            return cls(False, None, {}, {}, None, None, {}, reports)
        return cls(
            learning=True,
            knee=estimate.knee,
            sensitivity=dict(sorted(estimate.sensitivity.items())),
            sensitivity_sd=dict(sorted(estimate.sensitivity_sd.items())),
            io_penalty=estimate.io_penalty,
            io_penalty_sd=estimate.io_penalty_sd,
            observations=dict(sorted(estimate.observations.items())),
            reports=reports,
        )
