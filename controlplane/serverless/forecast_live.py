"""Forecast pre-warm in the live hub: the simulator's per-bin decision, made as the bins close.

The simulator plans forecast pre-warming over a whole trace (:mod:`.forecast_prewarm`); the hub
cannot, since it learns each bin's counts only as the bin closes. :class:`LiveForecast` is the
same decision made online: it counts each function's arrivals per bin (fed by
:meth:`~controlplane.serverless.keepalive.Policy.observe_invocation`, so the keep-alive replay of a
starting hub feeds it too), and at the start of each bin forecasts that bin from the closed ones
with the same forecaster and the same rule as the simulator (:func:`.forecast_prewarm.instances_needed`):
a function whose chance of at least one arrival reaches the threshold gets its free instances
until the bin's end. Given the same arrivals, its forecasts are the simulator's
(``tests/unit/serverless/test_forecast_live.py``).

The learned forecaster needs a fitted model: it is fitted (by the caller, in a worker thread: a
fit takes seconds) once ``fit_bins`` bins have closed and again every ``fit_bins`` after, and
makes no decision before its first fit, as in the simulator, where it pre-warms only after its
training span. The seasonal baseline needs no fit and decides from the first closed bin.

It counts only once armed (:meth:`LiveForecast.arm`, by the hub's function service): the
simulator feeds the same policy object every arrival of a trace and plans from the trace instead.
Memory: per function, the bins with arrivals among the last ``keep_bins`` (older ones are dropped
as new ones open).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from controlplane.predict import LoadPredictor, seasonal_baseline
from controlplane.serverless.forecast_prewarm import (
    ForecastPrewarmConfig,
    instances_needed,
    require_scikit_learn,
)
from controlplane.serverless.traces import FloatArray

__all__ = ["Decision", "LiveForecast"]

# (function, instances to have free, seconds to hold them: to the bin's end)
Decision = tuple[str, int, float]


class LiveForecast:
    """Arrivals per function per bin as they come; the pre-warms due at each bin's start."""

    def __init__(self, config: ForecastPrewarmConfig) -> None:
        if config.forecaster == "learned":
            require_scikit_learn()
        self.config = config
        # The learned features reach 60 bins back and the season three periods back.
        self.keep_bins = max(config.fit_bins, 3 * config.period_bins + 60) + 1
        self._counts: dict[str, deque[list[int]]] = {}  # function -> [bin, arrivals], oldest first
        self._origin: int | None = None  # the first bin seen: the history starts there
        self.armed = False
        self._model: LoadPredictor | None = None
        self._fitted_through: int | None = None  # the last closed bin the model was fitted on

    def bin_of(self, t: float) -> int:
        return math.floor(t / self.config.bin_s)

    def next_bin_start(self, now: float) -> float:
        """When the bin after the one holding ``now`` starts (same clock as the arrivals)."""
        return (self.bin_of(now) + 1) * self.config.bin_s

    def arm(self, now: float) -> None:
        """Count arrivals from now on; the history starts no later than the bin holding ``now``."""
        self.armed = True
        b = self.bin_of(now)
        if self._origin is None or b < self._origin:
            self._origin = b

    def observe(self, function: str, t: float) -> None:
        """An arrival of ``function`` at ``t`` (seconds on the clock the hub's policy uses); O(1)
        for arrivals in time order. Ignored until armed."""
        if not self.armed:
            return
        b = self.bin_of(t)
        if self._origin is None or b < self._origin:
            self._origin = b
        bins = self._counts.get(function)
        if bins is None:
            bins = self._counts[function] = deque()
        if bins and bins[-1][0] == b:
            bins[-1][1] += 1
        elif not bins or bins[-1][0] < b:
            bins.append([b, 1])
            while bins[0][0] < b - self.keep_bins:
                bins.popleft()
        else:  # out of order (rare): find its bin
            for entry in bins:
                if entry[0] == b:
                    entry[1] += 1
                    break
            else:
                bins.append([b, 1])
                self._counts[function] = deque(sorted(bins))

    @property
    def fitted(self) -> bool:
        return self._model is not None

    def closed_bins(self, now: float) -> int:
        return 0 if self._origin is None else max(0, self.bin_of(now) - self._origin)

    def history(self, now: float) -> tuple[list[str], FloatArray]:
        """The closed bins' counts (at most ``keep_bins``, oldest first) of the functions invoked in
        them: ``(names, (functions, bins))``. Older bins are dropped here."""
        current = self.bin_of(now)
        if self._origin is None or current <= self._origin:
            return [], np.zeros((0, 0))
        lo = max(self._origin, current - self.keep_bins)
        names: list[str] = []
        rows: list[FloatArray] = []
        for name in list(self._counts):
            bins = self._counts[name]
            while bins and bins[0][0] < lo:
                bins.popleft()
            if not bins:
                del self._counts[name]
                continue
            row = np.zeros(current - lo)
            for b, n in bins:
                if b < current:
                    row[b - lo] = n
            names.append(name)
            rows.append(row)
        return names, (np.stack(rows) if rows else np.zeros((0, current - lo)))

    def fit_due(self, now: float) -> bool:
        """Whether the learned model should be (re)fitted now."""
        if self.config.forecaster != "learned":
            return False
        closed = self.closed_bins(now)
        if self._fitted_through is None:
            return closed >= self.config.fit_bins
        return self.bin_of(now) - 1 - self._fitted_through >= self.config.fit_bins

    def fitting(self, now: float) -> FloatArray:
        """Start a (re)fit: the history to fit on. The span counts as fitted from here, so a fit
        that fails is not tried again before ``fit_bins`` more bins have closed."""
        self._fitted_through = self.bin_of(now) - 1
        return self.history(now)[1]

    def fit(self, history: FloatArray) -> LoadPredictor:
        """A model fitted on ``history`` (blocking, seconds: call it in a worker thread); put it
        in place with :meth:`use`."""
        return LoadPredictor(1, self.config.period_bins, seed=self.config.seed).fit(history)

    def use(self, model: LoadPredictor) -> None:
        self._model = model

    def forecast(self, history: FloatArray) -> FloatArray | None:
        """The open bin's forecast per row of ``history`` (None: this forecaster cannot yet)."""
        if history.size == 0:
            return None
        if self.config.forecaster == "seasonal":
            return seasonal_baseline(history, 1, self.config.period_bins)[:, -1]
        if self._model is None:
            return None
        return self._model.forecast(history)

    def decide(self, now: float, exec_s: Callable[[str], float]) -> list[Decision]:
        """The pre-warms due in the bin holding ``now`` (call it at the bin's start).

        ``exec_s``: a function's mean run time so far (the ``multi`` rule's overlap). The
        likeliest first."""
        if self.config.forecaster == "learned" and self._model is None:
            return []
        names, history = self.history(now)
        forecast = self.forecast(history)
        if forecast is None:
            return []
        busy = np.array([exec_s(n) for n in names]) if self.config.multi else np.zeros(len(names))
        want = instances_needed(forecast, busy, self.config)
        hold_s = self.next_bin_start(now) - now
        due = np.flatnonzero(want)
        due = due[np.argsort(-forecast[due], kind="stable")]
        return [(names[i], int(want[i]), hold_s) for i in due]
