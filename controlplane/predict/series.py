"""Input checks and causal rolling helpers shared by the baselines and the learned predictor.

A *history* is a 2-D array ``(keys, bins)`` of non-negative counts (a 1-D array is one key).
Every rolling helper returns an array shaped like the history whose column ``t`` uses bins
``0..t`` only, so a forecast "made at the end of bin t" never sees the future.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def as_history(history: npt.ArrayLike) -> FloatArray:
    """``history`` as a float ``(keys, bins)`` array; ValueError naming the problem otherwise."""
    try:
        a = np.asarray(history, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"history: not a numeric array ({exc})") from None
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"history: expected 1-D (bins) or 2-D (keys, bins), got {a.ndim}-D")
    if a.size == 0:
        raise ValueError("history: empty (no keys or no bins)")
    if not np.isfinite(a).all():
        key, t = np.argwhere(~np.isfinite(a))[0]
        raise ValueError(f"history: NaN or infinite count at key {key}, bin {t}")
    if (a < 0).any():
        key, t = np.argwhere(a < 0)[0]
        raise ValueError(f"history: negative count {a[key, t]:g} at key {key}, bin {t}")
    return a


def check_positive(name: str, value: int) -> int:
    """``value`` if it is an integer >= 1; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    return int(value)


def check_alpha(alpha: float) -> float:
    """A smoothing factor in (0, 1]."""
    if not 0.0 < float(alpha) <= 1.0:
        raise ValueError(f"alpha: expected 0 < alpha <= 1, got {alpha!r}")
    return float(alpha)


def window_mean(y: FloatArray, width: int) -> FloatArray:
    """Mean of the last ``width`` bins up to each bin (fewer at the start)."""
    c = np.concatenate([np.zeros((y.shape[0], 1)), np.cumsum(y, axis=1)], axis=1)
    t = np.arange(y.shape[1])
    lo = np.maximum(0, t + 1 - width)
    return (c[:, t + 1] - c[:, lo]) / (t + 1 - lo)


def ewma_path(y: FloatArray, alpha: float) -> FloatArray:
    """Exponentially weighted mean up to each bin, started at the first bin's value."""
    out = np.empty_like(y)
    level = y[:, 0].copy()
    for t in range(y.shape[1]):
        level = alpha * y[:, t] + (1.0 - alpha) * level
        out[:, t] = level
    return out


def shifted(y: FloatArray, lag: int) -> FloatArray:
    """``out[:, t] = y[:, t - lag]`` (``lag >= 0``), NaN where that is before the first bin."""
    if lag < 0:
        raise ValueError(f"lag: a forecast may not look ahead (lag {lag})")
    out = np.full_like(y, np.nan)
    if lag < y.shape[1]:
        out[:, lag:] = y[:, : y.shape[1] - lag]
    return out
