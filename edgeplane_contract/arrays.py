"""The numpy array aliases the vectorised code is typed with, and a fast ``clip``."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "FloatArray", "IntArray", "clip"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def clip(values: FloatArray, low: float, high: float) -> FloatArray:
    """``np.clip`` without its Python-level dispatch cost (it shows up at 1,000 nodes)."""
    result: FloatArray = np.minimum(np.maximum(values, low), high)
    return result
