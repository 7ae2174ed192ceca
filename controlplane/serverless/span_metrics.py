"""A simulation's metrics over a later span of its trace (e.g. the test span of a forecaster
fitted on the earlier part): the invocations arriving from ``start_s`` on, and the memory wasted
after it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from controlplane.serverless.funcsim import SimulationResult, p75_function_rate
from controlplane.serverless.traces import Workload

__all__ = ["SpanMetrics", "span_metrics"]


@dataclass(frozen=True, slots=True)
class SpanMetrics:
    """Cold starts of the span's invocations, the 75th-percentile function's cold-start rate
    (over the functions invoked in the span) and the memory-time wasted in the span."""

    start_s: float
    invocations: int
    cold_starts: int
    cold_start_rate: float
    cold_start_rate_p75_function: float
    wasted_memory_gb_s: float

    def summary(self) -> dict[str, float | int]:
        return asdict(self)


def span_metrics(workload: Workload, result: SimulationResult, start_s: float) -> SpanMetrics:
    """Metrics from ``start_s`` to the horizon. ``result`` must come from
    ``simulate(..., waste_split_s=start_s)`` (the waste after the split is counted there)."""
    arrivals = {f.function_id: f.arrivals_s for f in workload.functions}
    invocations = cold = 0
    rates = []
    for r in result.functions:
        late = arrivals[r.function_id] >= start_s
        n = int(late.sum())
        if not n:
            continue
        c = int((r.extra_latency_s[late] > 0).sum())
        invocations += n
        cold += c
        rates.append(c / n)
    return SpanMetrics(
        start_s=start_s,
        invocations=invocations,
        cold_starts=cold,
        cold_start_rate=cold / invocations if invocations else 0.0,
        cold_start_rate_p75_function=p75_function_rate(rates),
        wasted_memory_gb_s=float(sum(r.wasted_gb_s_after_split for r in result.functions)),
    )
