"""An online forecast of an amount arriving per time bin: fed event by event, asked at any time.

What a controller that acts ahead needs (the power manager waking nodes before the CPU they will
need arrives): the expected amount arriving over the next ``horizon_s`` seconds, from what has
arrived so far only. Each time a bin closes, the rates of the open bin and of the one after it
come from :func:`~controlplane.predict.baselines.seasonal_baseline` over the closed bins (the
season's profile blended with an EWMA level; the level alone before a season is seen), so a
horizon that reaches into the next bin sees the next bin's rise. Within the open bin, a burst
that has already begun counts too: the open bin's rate is at least its rate so far, once a
quarter of the bin has passed (a shorter stretch is too noisy to extrapolate).
"""

from __future__ import annotations

import math

import numpy as np

from controlplane.predict.baselines import seasonal_baseline
from controlplane.predict.series import check_positive

__all__ = ["OnlineBinForecast"]


class OnlineBinForecast:
    """Amount per second expected ahead, from amounts observed at times (seconds, non-decreasing).

    ``bin_s``: the bin width; ``period_s``: the season (a day); ``weight``, ``alpha``,
    ``seasons``: :func:`seasonal_baseline`'s. The work per closed bin is one pass over the
    closed bins (numpy), so a bin of minutes over days costs well under a millisecond.
    """

    def __init__(
        self,
        *,
        bin_s: float,
        period_s: float,
        weight: float = 0.5,
        alpha: float = 0.3,
        seasons: int = 3,
        start_s: float = 0.0,
    ) -> None:
        if not (math.isfinite(bin_s) and bin_s > 0):
            raise ValueError(f"bin_s: expected a positive number of seconds, got {bin_s!r}")
        if not (math.isfinite(period_s) and period_s >= bin_s):
            raise ValueError(f"period_s: expected at least bin_s ({bin_s:g}), got {period_s!r}")
        self.bin_s = float(bin_s)
        self.period_bins = max(1, round(period_s / bin_s))
        self.weight = weight
        self.alpha = alpha
        self.seasons = check_positive("seasons", seasons)
        self.start_s = start_s
        self._closed: list[float] = []
        self._open = 0.0  # amount in the open bin
        # Per second: the open bin's forecast rate and the next bin's (horizons 1 and 2).
        self._rates = (0.0, 0.0)
        # Validate weight/alpha once, the way the baseline would.
        seasonal_baseline(np.zeros((1, 1)), 1, self.period_bins, weight=weight, alpha=alpha, seasons=seasons)

    @property
    def closed_bins(self) -> int:
        """How many bins have closed (the forecast's history)."""
        return len(self._closed)

    def observe(self, t: float, amount: float) -> None:
        """``amount`` arrived at ``t`` (seconds; not before the last observation's bin)."""
        if not (math.isfinite(amount) and amount >= 0):
            raise ValueError(f"amount: expected a non-negative number, got {amount!r}")
        self._advance(t)
        self._open += amount

    def rate(self, now: float) -> float:
        """The amount per second expected for the rest of the bin that holds ``now``."""
        self._advance(now)
        rate = self._rates[0]
        elapsed = now - self._open_start()
        if elapsed >= 0.25 * self.bin_s:
            rate = max(rate, self._open / elapsed)
        return rate

    def expected(self, now: float, horizon_s: float) -> float:
        """The amount expected to arrive in ``[now, now + horizon_s)``: the open bin's rate up to
        its end, the next bin's beyond it."""
        horizon_s = max(0.0, horizon_s)
        rate = self.rate(now)  # advances first: the open bin may have changed
        in_open = min(horizon_s, self._open_start() + self.bin_s - now)
        return rate * in_open + self._rates[1] * (horizon_s - in_open)

    def _open_start(self) -> float:
        return self.start_s + len(self._closed) * self.bin_s

    def _advance(self, t: float) -> None:
        closed = False
        while t >= self._open_start() + self.bin_s:
            self._closed.append(self._open)
            self._open = 0.0
            closed = True
        if closed:
            history = np.asarray(self._closed, dtype=np.float64)[None, :]
            self._rates = (self._forecast(history, 1), self._forecast(history, 2))

    def _forecast(self, history: np.ndarray, horizon: int) -> float:
        value = seasonal_baseline(
            history, horizon, self.period_bins, weight=self.weight, alpha=self.alpha, seasons=self.seasons
        )[0, -1]
        return max(0.0, float(value)) / self.bin_s
