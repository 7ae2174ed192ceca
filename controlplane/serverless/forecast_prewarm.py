"""Forecast-driven pre-warming: a per-function load forecast decides, minute by minute, how many
free instances of each function to have loaded at the start of the minute.

Offline, over a whole workload (the simulator's input; the decisions depend on arrival times
only, as the call-graph advisor's do; the live hub makes the same decision as the bins close,
:mod:`.forecast_live`):

1. per-function arrival counts per one-minute bin (:func:`arrival_counts`);
2. the forecast of bin ``m`` made at the start of ``m`` from bins ``0..m-1`` only
   (:func:`next_bin_forecast`, with :mod:`controlplane.predict`): the learned
   :class:`~controlplane.predict.LoadPredictor`, fitted on the first ``train_fraction`` of the
   bins and used only after them (its decisions before are none, so nothing it saw in training is
   scored), or the numpy-only seasonal baseline, used from the first bin;
3. a bin is pre-warmed when the probability of at least one arrival, ``1 - exp(-forecast)``
   (Poisson with the forecast as its mean), reaches ``threshold``; it asks for one free instance,
   or with ``multi`` as many as the forecast arrivals are expected to need at once
   (:func:`instances_needed`), from the bin's start to its end (:class:`PrewarmPlan`).

The simulator carries a plan out (:func:`controlplane.serverless.funcsim.simulate_function`):
free instances alive at the bin's start are held to its end, the missing ones load then. The
live hub makes each bin's decision at its start (:class:`~.forecast_live.LiveForecast`) and asks
an agent to have the instances free until the bin's end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from controlplane.predict import LoadPredictor, PredictDependencyError, seasonal_baseline
from controlplane.predict.model import INSTALL_HINT
from controlplane.serverless.traces import FloatArray, Workload

__all__ = [
    "ForecastPrewarmConfig",
    "ForecastPrewarmer",
    "LoadPrewarmer",
    "PrewarmPlan",
    "arrival_counts",
    "busy_time_before",
    "instances_needed",
    "next_bin_forecast",
    "plans_from_forecast",
    "require_scikit_learn",
]

IntArray = npt.NDArray[np.int64]
Forecaster = Literal["learned", "seasonal"]


@dataclass(frozen=True, slots=True)
class PrewarmPlan:
    """One function's requests: at ``starts_s[i]``, have ``instances[i]`` free instances (idle
    or loading) until ``ends_s[i]``. Sorted by start."""

    starts_s: FloatArray
    ends_s: FloatArray
    instances: IntArray

    def __post_init__(self) -> None:
        if not len(self.starts_s) == len(self.ends_s) == len(self.instances):
            raise ValueError("plan: starts, ends and instances differ in length")

    def __len__(self) -> int:
        return len(self.starts_s)


class LoadPrewarmer(Protocol):
    """Plans pre-warm requests for every function of a workload, from its arrivals alone."""

    def plan(self, workload: Workload) -> list[PrewarmPlan | None]:
        """One entry per function of ``workload.functions`` (None: no request)."""
        ...


@dataclass(frozen=True, slots=True)
class ForecastPrewarmConfig:
    """``threshold``: the probability of at least one arrival in a bin that pre-warms it.
    ``multi``: ask for more than one instance when the forecast arrivals would overlap (at most
    ``max_instances``). ``period_bins``: the forecasters' season (60 one-minute bins: the hourly
    timers of a one-day trace, as in ``bench/predict.py``). ``train_fraction``: the learned
    model's training span (the first 2/3 of the bins: minutes 0-959 of a day)."""

    forecaster: Forecaster = "learned"
    threshold: float = 0.5
    multi: bool = False
    max_instances: int = 4
    bin_s: float = 60.0
    period_bins: int = 60
    train_fraction: float = 2.0 / 3.0
    # Live (``forecast_live.py``): the learned model is fitted once this many bins have closed
    # (16 h of minutes: the simulator's 2/3 of a day) and again every as many after.
    fit_bins: int = 960
    seed: int = 0

    def __post_init__(self) -> None:
        if self.forecaster not in ("learned", "seasonal"):
            raise ValueError(f"forecaster: expected 'learned' or 'seasonal', got {self.forecaster!r}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold: expected 0 < threshold <= 1, got {self.threshold!r}")
        if self.max_instances < 1 or self.period_bins < 1 or self.fit_bins < 2 or not self.bin_s > 0:
            raise ValueError("max_instances and period_bins must be >= 1, fit_bins >= 2, bin_s > 0")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train_fraction: expected 0 < f < 1, got {self.train_fraction!r}")


def require_scikit_learn() -> None:
    """Raise :class:`PredictDependencyError` (one line naming the install command) when
    scikit-learn is missing, so a policy that needs it fails before any work."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise PredictDependencyError(INSTALL_HINT) from None


def arrival_counts(workload: Workload, bin_s: float = 60.0) -> FloatArray:
    """``(functions, bins)`` arrivals per bin over ``[0, horizon)``."""
    bins = max(1, math.ceil(workload.horizon_s / bin_s))
    out = np.zeros((len(workload.functions), bins), dtype=np.float64)
    for i, f in enumerate(workload.functions):
        idx = np.clip((f.arrivals_s // bin_s).astype(np.int64), 0, bins - 1)
        out[i] = np.bincount(idx, minlength=bins)
    return out


def train_bins(bins: int, config: ForecastPrewarmConfig) -> int:
    """The learned model's training span in bins (its decisions start after it)."""
    return max(2, round(bins * config.train_fraction))


def next_bin_forecast(counts: FloatArray, config: ForecastPrewarmConfig) -> FloatArray:
    """``out[:, m]``: the forecast of bin ``m`` made at its start from bins ``0..m-1``; NaN where
    none is made (bin 0, and the learned model's training span)."""
    keys, bins = counts.shape
    out = np.full((keys, bins), np.nan)
    if bins < 2 or keys == 0:
        return out
    if config.forecaster == "seasonal":
        path = seasonal_baseline(counts, 1, config.period_bins)
        first = 1
    else:
        require_scikit_learn()
        first = train_bins(bins, config)
        if first >= bins:
            return out
        model = LoadPredictor(1, config.period_bins, seed=config.seed).fit(counts[:, :first])
        path = model.predict_path(counts)
    # path[:, t] forecasts bin t + 1 from bins 0..t: shift it onto the bin it forecasts.
    out[:, first:] = path[:, first - 1 : bins - 1]
    return out


def busy_time_before(workload: Workload, bin_s: float = 60.0) -> FloatArray:
    """``(functions, bins)`` mean execution time of the invocations that ended before each bin's
    start (0 where none has): what a decision at the bin's start can know."""
    bins = max(1, math.ceil(workload.horizon_s / bin_s))
    starts = np.arange(bins) * bin_s
    out = np.zeros((len(workload.functions), bins))
    for i, f in enumerate(workload.functions):
        ends = f.arrivals_s + f.durations_s
        order = np.argsort(ends, kind="stable")
        total = np.concatenate(([0.0], np.cumsum(f.durations_s[order])))
        done = np.searchsorted(ends[order], starts, side="right")
        out[i] = total[done] / np.maximum(done, 1)
    return out


def instances_needed(forecast: FloatArray, busy_s: FloatArray, config: ForecastPrewarmConfig) -> IntArray:
    """Instances to ask for per bin: 0 below the threshold (or without a forecast), else 1, or
    with ``multi`` the forecast arrivals' expected overlap: ``1 + round(f * min(1, d / bin))``
    (one instance, plus one per arrival expected to come while another runs, for ``f`` arrivals
    of mean run time ``d`` spread over the bin), at most ``ceil(f)`` and ``max_instances``."""
    f = np.nan_to_num(forecast, nan=0.0)
    on = 1.0 - np.exp(-f) >= config.threshold
    if not config.multi:
        return on.astype(np.int64)
    overlap = 1.0 + np.round(f * np.minimum(1.0, busy_s / config.bin_s))
    k = np.minimum(np.minimum(overlap, np.ceil(f)), config.max_instances)
    return np.where(on, np.maximum(k, 1.0), 0.0).astype(np.int64)


def plans_from_forecast(
    workload: Workload, forecast: FloatArray, config: ForecastPrewarmConfig
) -> list[PrewarmPlan | None]:
    """Turn per-bin forecasts into each function's requests (None for a function never pre-warmed)."""
    busy = busy_time_before(workload, config.bin_s) if config.multi else np.zeros_like(forecast)
    want = instances_needed(forecast, busy, config)
    out: list[PrewarmPlan | None] = []
    for row in want:
        bins = np.flatnonzero(row)
        if not len(bins):
            out.append(None)
            continue
        starts = (bins * config.bin_s).astype(np.float64)
        ends = starts + config.bin_s  # to the bin's end: the next bin is decided at its own start
        out.append(PrewarmPlan(starts, ends, row[bins]))
    return out


class ForecastPrewarmer:
    """:class:`LoadPrewarmer` from a :mod:`controlplane.predict` forecast (see the module doc).

    The learned forecaster needs scikit-learn: building one without it raises
    :class:`PredictDependencyError`, whose message names ``pip install -e '.[predict]'``.
    """

    def __init__(self, config: ForecastPrewarmConfig | None = None) -> None:
        self.config = config or ForecastPrewarmConfig()
        if self.config.forecaster == "learned":
            require_scikit_learn()

    def plan(self, workload: Workload) -> list[PrewarmPlan | None]:
        counts = arrival_counts(workload, self.config.bin_s)
        return plans_from_forecast(workload, next_bin_forecast(counts, self.config), self.config)
