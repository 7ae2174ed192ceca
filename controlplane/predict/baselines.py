"""Baselines: naive, seasonal-naive, EWMA, and the seasonal baseline (profile blended with a level).

Each function takes a history ``(keys, bins)`` (or 1-D) and returns forecasts for *every* origin:
``out[:, t]`` is the forecast of bin ``t + horizon`` made at the end of bin ``t`` from bins
``0..t``. The forecast for the first bin after the history is ``out[:, -1]``. NaN means "no
forecast" (not enough history), and appears only where a seasonal lag reaches before bin 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from controlplane.predict.series import (
    FloatArray,
    as_history,
    check_alpha,
    check_positive,
    ewma_path,
    shifted,
)


def naive(history: npt.ArrayLike, horizon: int = 1) -> FloatArray:
    """The last value: ``y[t]`` for every horizon."""
    check_positive("horizon", horizon)
    return as_history(history).copy()


def seasonal_lag(horizon: int, period: int) -> int:
    """Lag from the origin to the latest bin at the target's phase: ``k*period - horizon`` for the
    smallest ``k`` with that lag ``>= 0``."""
    k = -(-horizon // period)
    return k * period - horizon


def seasonal_naive(history: npt.ArrayLike, horizon: int, period: int) -> FloatArray:
    """The same bin one season earlier (one day for daily seasonality): ``y[t + h - k*period]``."""
    h, p = check_positive("horizon", horizon), check_positive("period", period)
    return shifted(as_history(history), seasonal_lag(h, p))


def ewma(history: npt.ArrayLike, horizon: int = 1, alpha: float = 0.3) -> FloatArray:
    """The exponentially weighted mean up to the origin, for every horizon."""
    check_positive("horizon", horizon)
    return ewma_path(as_history(history), check_alpha(alpha))


def seasonal_profile(history: npt.ArrayLike, horizon: int, period: int, seasons: int = 3) -> FloatArray:
    """Mean of the target's phase over the last ``seasons`` seasons (those seen so far)."""
    h, p = check_positive("horizon", horizon), check_positive("period", period)
    check_positive("seasons", seasons)
    y = as_history(history)
    first = seasonal_lag(h, p)
    stack = np.stack([shifted(y, first + i * p) for i in range(seasons)])
    seen = np.isfinite(stack).sum(axis=0)
    total = np.nansum(stack, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen > 0, total / np.maximum(seen, 1), np.nan)


def seasonal_baseline(
    history: npt.ArrayLike,
    horizon: int,
    period: int,
    *,
    weight: float = 0.5,
    alpha: float = 0.3,
    seasons: int = 3,
) -> FloatArray:
    """``weight * profile + (1 - weight) * EWMA level``; the level alone before a season is seen.

    Works without scikit-learn: it is the predictor's fallback and one of its features.
    """
    if not 0.0 <= float(weight) <= 1.0:
        raise ValueError(f"weight: expected 0 <= weight <= 1, got {weight!r}")
    y = as_history(history)
    level = ewma(y, horizon, alpha)
    profile = seasonal_profile(y, horizon, period, seasons)
    return np.where(np.isfinite(profile), weight * profile + (1.0 - weight) * level, level)
