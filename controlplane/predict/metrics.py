"""Forecast errors. Cells where the forecast is NaN must be dropped by the caller beforehand."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def mae(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> float:
    """Mean absolute error over all cells."""
    a, f = np.asarray(actual, dtype=np.float64), np.asarray(forecast, dtype=np.float64)
    return float(np.mean(np.abs(a - f)))


def mape(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> float:
    """Mean absolute percentage error over the cells with ``actual > 0`` (zeros are skipped:
    their percentage error is undefined); NaN when no cell is positive."""
    a, f = np.asarray(actual, dtype=np.float64), np.asarray(forecast, dtype=np.float64)
    pos = a > 0
    if not pos.any():
        return float("nan")
    return float(np.mean(np.abs(a[pos] - f[pos]) / a[pos]) * 100.0)


def wape(actual: npt.ArrayLike, forecast: npt.ArrayLike) -> float:
    """Weighted APE: ``sum |error| / sum actual`` in percent (all cells, zeros included)."""
    a, f = np.asarray(actual, dtype=np.float64), np.asarray(forecast, dtype=np.float64)
    total = a.sum()
    return float(np.abs(a - f).sum() / total * 100.0) if total > 0 else float("nan")
