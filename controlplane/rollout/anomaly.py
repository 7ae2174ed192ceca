"""The anomaly score of the source: over a sliding window of the latest ``size`` samples of a
metric (higher = worse), baseline = the window's ``percentile``-th percentile, and
score = max(0, (current - baseline) / baseline), the baseline no lower than ``floor``."""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["AnomalyWindow"]


class AnomalyWindow:
    """The latest ``size`` samples of one metric, and the score of a value against them."""

    def __init__(self, size: int = 300, percentile: float = 95.0, *, floor: float = 0.0) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        if not 0.0 < percentile <= 100.0:
            raise ValueError("percentile must be in (0, 100]")
        if floor < 0:
            raise ValueError("floor must be >= 0")
        self.percentile = percentile
        # The least baseline: a metric whose healthy value is 0 (the regret of a policy that
        # decides as the objective does) has nothing to deviate from in proportion otherwise.
        self.floor = floor
        self._samples: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self._samples.append(float(value))

    def __len__(self) -> int:
        return len(self._samples)

    def baseline(self) -> float | None:
        """The window's percentile (None while it is empty)."""
        if not self._samples:
            return None
        return float(np.percentile(np.fromiter(self._samples, dtype=np.float64), self.percentile))

    def score(self, current: float) -> float:
        """max(0, (current - baseline) / baseline); 0 while the window is empty or its baseline
        is not positive (a metric at zero has nothing to deviate from in proportion)."""
        base = self.baseline()
        if base is None:
            return 0.0
        base = max(base, self.floor)
        if base <= 0.0:
            return 0.0
        return max(0.0, (current - base) / base)
