"""The learned predictor: a scikit-learn regressor on causal lag features, pooled over keys.

At each origin ``t`` (end of bin ``t``) and for a fixed ``horizon`` it predicts the count of bin
``t + horizon`` from: the last three bins, the means of the last 5, 15 and 60 bins, two EWMAs,
the fraction of busy bins in the last 60, the seasonal-naive value and the seasonal profile at
the target's phase, the seasonal baseline, the key's scale, and (when ``bins_per_day`` is given)
the target's time of day. Features and target are divided by the key's recent scale (the mean of
its last ``period`` bins, at least 1), so one model serves a function with 5 calls a day and one
with 5,000 a minute; the prediction is multiplied back.

scikit-learn is optional (``pip install -e '.[predict]'``): without it the module imports and
:func:`~controlplane.predict.baselines.seasonal_baseline` still works; ``fit`` raises
:class:`PredictDependencyError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from controlplane.predict.baselines import seasonal_baseline, seasonal_naive, seasonal_profile
from controlplane.predict.series import (
    FloatArray,
    as_history,
    check_positive,
    ewma_path,
    shifted,
    window_mean,
)

Model = Literal["hgb", "ridge"]
Loss = Literal["poisson", "absolute_error"]
INSTALL_HINT = "the learned predictor needs scikit-learn: pip install -e '.[predict]'"


class PredictDependencyError(ImportError):
    """scikit-learn is missing; the message names the install command."""


def _regressor(model: Model, loss: Loss, seed: int) -> Any:
    try:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from sklearn.linear_model import Ridge
    except ImportError:
        raise PredictDependencyError(INSTALL_HINT) from None
    if model == "hgb":
        # Poisson loss (the mean; counts are non-negative and their noise grows with the level) or
        # absolute error (the median: fewer over-forecasts after a one-off burst).
        # No early stopping: its validation split would make the fit depend on a random draw.
        return HistGradientBoostingRegressor(
            loss=loss, max_iter=150, learning_rate=0.1, max_leaf_nodes=31,
            min_samples_leaf=40, early_stopping=False, random_state=seed,
        )  # fmt: skip
    return Ridge(alpha=1.0)


def _scale(history: FloatArray, period: int) -> FloatArray:
    # At least 1 call per bin: a rare function is modelled in calls, a busy one relative to its level.
    return np.maximum(window_mean(history, max(period, 60)), 1.0)


def features(history: FloatArray, horizon: int, period: int, bins_per_day: int | None) -> FloatArray:
    """``(keys, bins, F)`` features, already divided by the scale (the last feature is log-scale)."""
    y = history
    scale = _scale(y, period)
    cols = [
        y,
        shifted(y, 1),
        shifted(y, 2),
        window_mean(y, 5),
        window_mean(y, 15),
        window_mean(y, 60),
        ewma_path(y, 0.1),
        ewma_path(y, 0.5),
        seasonal_naive(y, horizon, period),
        seasonal_profile(y, horizon, period, 3),
        seasonal_baseline(y, horizon, period),
    ]
    scaled = [c / scale for c in cols]
    busy = window_mean((y > 0).astype(np.float64), 60)
    extra = [busy, np.log(scale)]
    if bins_per_day:
        phase = 2.0 * np.pi * ((np.arange(y.shape[1]) + horizon) % bins_per_day) / bins_per_day
        extra += [np.broadcast_to(np.sin(phase), y.shape), np.broadcast_to(np.cos(phase), y.shape)]
    return np.stack(scaled + extra, axis=-1)


@dataclass(slots=True)
class LoadPredictor:
    """Arrivals per key ``horizon`` bins ahead; ``period`` is the season in bins (1,440 for a day
    of minutes, 288 for a day of 5-minute bins). Deterministic for a given ``seed``."""

    horizon: int
    period: int
    model: Model = "hgb"
    loss: Loss = "poisson"  # the trees' loss (hgb only)
    bins_per_day: int | None = None
    max_rows: int = 200_000  # training rows kept (a seeded sample): bounds CPU time and memory
    seed: int = 0
    _fitted: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_positive("horizon", self.horizon)
        check_positive("period", self.period)
        check_positive("max_rows", self.max_rows)
        if self.model not in ("hgb", "ridge"):
            raise ValueError(f"model: expected 'hgb' or 'ridge', got {self.model!r}")
        if self.loss not in ("poisson", "absolute_error"):
            raise ValueError(f"loss: expected 'poisson' or 'absolute_error', got {self.loss!r}")

    def fit(self, history: npt.ArrayLike) -> LoadPredictor:
        """Learn from every origin of ``history`` whose target bin is inside it."""
        y = as_history(history)
        if y.shape[1] <= self.horizon:
            raise ValueError(f"history: {y.shape[1]} bins, need more than horizon ({self.horizon})")
        reg = _regressor(self.model, self.loss, self.seed)
        x = self._x(y)[:, : -self.horizon].reshape(-1, self._width())
        target = (y[:, self.horizon :] / _scale(y, self.period)[:, : -self.horizon]).reshape(-1)
        if len(target) > self.max_rows:
            keep = np.sort(np.random.default_rng(self.seed).choice(len(target), self.max_rows, replace=False))
            x, target = x[keep], target[keep]
        self._fitted = reg.fit(self._fill(x), target)
        return self

    def predict_path(self, history: npt.ArrayLike) -> FloatArray:
        """Forecasts at every origin, shaped like the history (see the baselines' convention)."""
        if self._fitted is None:
            raise ValueError("predictor: call fit() before predicting")
        y = as_history(history)
        x = self._x(y).reshape(-1, self._width())
        out = self._fitted.predict(self._fill(x)).reshape(y.shape) * _scale(y, self.period)
        return np.maximum(out, 0.0)

    def forecast(self, history: npt.ArrayLike) -> FloatArray:
        """The forecast of bin ``bins - 1 + horizon`` per key, from the whole history."""
        return self.predict_path(history)[:, -1]

    def _x(self, y: FloatArray) -> FloatArray:
        return features(y, self.horizon, self.period, self.bins_per_day)

    def _width(self) -> int:
        return 13 + (2 if self.bins_per_day else 0)

    def _fill(self, x: FloatArray) -> FloatArray:
        # Ridge cannot take NaN (no season seen yet); the trees route NaN on their own.
        return np.nan_to_num(x, nan=0.0) if self.model == "ridge" else x
