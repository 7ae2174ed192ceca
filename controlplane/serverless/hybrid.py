"""The hybrid histogram keep-alive / pre-warm policy of Shahrad et al., "Serverless in the Wild",
USENIX ATC 2020.

A per-function histogram of idle times (4 h range, 1-minute bins); the pre-warm window is the 5th
percentile minus 10 %, the window ends at the 99th percentile plus 10 %; too little history or too
flat a histogram (coefficient of variation of the bin counts below 2) falls back to a conservative
keep-alive of the histogram range; when most idle times are beyond the range, a time-series
forecast of them sets the window (the paper uses ARIMA; we use simple exponential smoothing, which
is the optimal forecast of an ARIMA(0,1,1) process and is stable on the handful of samples a
function has).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from controlplane.serverless.window import Window

__all__ = ["HybridConfig", "HybridHistogramPolicy", "IdleTimeHistogram"]


@dataclass(frozen=True, slots=True)
class HybridConfig:
    """Parameters of :class:`HybridHistogramPolicy`; defaults are the paper's where it gives one.

    ``min_samples`` is ours (the paper asks for a "representative" histogram without a count).
    ``refresh_s`` bounds how often a busy function's window is recomputed: the histogram has
    1-minute bins, so recomputing more than once a simulated minute changes nothing material.
    """

    range_s: float = 4 * 3600.0
    bin_s: float = 60.0
    head_percentile: float = 5.0
    tail_percentile: float = 99.0
    margin: float = 0.10
    cv_threshold: float = 2.0
    min_samples: int = 10
    oob_fraction: float = 0.5
    min_oob_samples: int = 2
    forecast_alpha: float = 0.5
    forecast_margin: float = 0.15
    fallback_keep_alive_s: float | None = None  # None: the histogram range, as in the paper
    refresh_s: float = 60.0
    # Ours, off in plain hybrid: trust a short history early when its idle times all lie within
    # `early_span_bins` bins (a timer), instead of waiting for `min_samples` under the fallback.
    early_min_samples: int = 3
    early_span_bins: int | None = None

    def __post_init__(self) -> None:
        if self.range_s <= 0 or self.bin_s <= 0 or self.range_s < self.bin_s:
            raise ValueError("need range_s >= bin_s > 0")
        if not 0 <= self.head_percentile <= self.tail_percentile <= 100:
            raise ValueError("need 0 <= head_percentile <= tail_percentile <= 100")
        if not 0 < self.forecast_alpha <= 1:
            raise ValueError("forecast_alpha must be in (0, 1]")

    @property
    def n_bins(self) -> int:
        return round(self.range_s / self.bin_s)

    @property
    def fallback_window(self) -> Window:
        ka = self.range_s if self.fallback_keep_alive_s is None else self.fallback_keep_alive_s
        return Window(0.0, float(ka))


class IdleTimeHistogram:
    """Idle times of one function: fixed-width bins up to a range, plus the out-of-bounds ones.

    Keeps the sum of squared bin counts so the coefficient of variation is O(1), and a simple
    exponential-smoothing level of the out-of-bounds idle times for the forecast.
    """

    __slots__ = (
        "_alpha",
        "bin_s",
        "counts",
        "n_in",
        "n_oob",
        "oob_level",
        "range_s",
        "sum_sq",
    )

    def __init__(self, *, range_s: float = 4 * 3600.0, bin_s: float = 60.0, alpha: float = 0.5) -> None:
        self.range_s = range_s
        self.bin_s = bin_s
        self.counts = [0] * round(range_s / bin_s)
        self.n_in = 0
        self.n_oob = 0
        self.sum_sq = 0
        self.oob_level = 0.0
        self._alpha = alpha

    def add(self, idle_s: float) -> None:
        """Record one idle time (negative values count as 0)."""
        b = int(idle_s // self.bin_s) if idle_s > 0 else 0
        if b < len(self.counts):
            c = self.counts[b]
            self.counts[b] = c + 1
            self.sum_sq += 2 * c + 1
            self.n_in += 1
        else:
            self.oob_level = (
                idle_s if self.n_oob == 0 else self._alpha * idle_s + (1 - self._alpha) * self.oob_level
            )
            self.n_oob += 1

    @property
    def total(self) -> int:
        return self.n_in + self.n_oob

    def cv(self) -> float:
        """Coefficient of variation of the bin counts (0 when empty)."""
        if self.n_in == 0:
            return 0.0
        n = len(self.counts)
        mean = self.n_in / n
        var = max(0.0, self.sum_sq / n - mean * mean)
        return math.sqrt(var) / mean

    def percentile_bin(self, p: float, *, start_bin: int = 0) -> int:
        """Index of the first bin at which the cumulative share of in-range samples (from
        ``start_bin`` on) reaches ``p``%."""
        counts = self.counts[start_bin:] if start_bin else self.counts
        n = self.n_in if not start_bin else sum(counts)
        if n == 0:
            raise ValueError("empty histogram")
        target = max(1.0, p / 100.0 * n)
        cum = 0
        for i, c in enumerate(counts):
            cum += c
            if cum >= target - 1e-9:
                return i + start_bin
        return len(self.counts) - 1

    def gaps_are_regular(self, *, min_samples: int = 3, max_ratio: float = 2.0) -> bool:
        """Whether the idle times past the first bin (the gaps between bursts, leaving out
        back-to-back invocations) vary by at most ``max_ratio`` from head (5 %) to tail (99 %)."""
        if self.n_in - self.counts[0] < min_samples:
            return False
        head = self.percentile_bin(5.0, start_bin=1)
        tail = self.percentile_bin(99.0, start_bin=1)
        return (tail + 1) <= max_ratio * head

    def forecast_oob_s(self) -> float:
        """Forecast of the next out-of-bounds idle time (exponential smoothing level)."""
        return self.oob_level


@dataclass(slots=True)
class _HybridState:
    hist: IdleTimeHistogram
    last_end: float = -math.inf
    window: Window = field(default_factory=lambda: Window(0.0, 0.0))
    source: str = "fallback"
    dirty: bool = True
    computed_at: float = -math.inf


class HybridHistogramPolicy:
    """The hybrid histogram keep-alive / pre-warm policy (see the module docstring)."""

    def __init__(self, config: HybridConfig | None = None, *, name: str = "hybrid") -> None:
        self.config = config or HybridConfig()
        self._name = name
        self._state: dict[str, _HybridState] = {}
        self._fallback = self.config.fallback_window

    @property
    def name(self) -> str:
        return self._name

    def _get(self, function_id: str) -> _HybridState:
        st = self._state.get(function_id)
        if st is None:
            cfg = self.config
            st = _HybridState(
                IdleTimeHistogram(range_s=cfg.range_s, bin_s=cfg.bin_s, alpha=cfg.forecast_alpha),
                window=self._fallback,
            )
            self._state[function_id] = st
        return st

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        st = self._get(function_id)
        if st.last_end > -math.inf:
            # Idle time = gap between the end of the function's latest invocation and this one's
            # start (0 while another invocation is still running), as in the paper.
            st.hist.add(t_s - st.last_end)
            st.dirty = True
        end = t_s + duration_s
        if end > st.last_end:
            st.last_end = end

    def histogram(self, function_id: str) -> IdleTimeHistogram:
        """The function's idle-time histogram (created empty if unseen)."""
        return self._get(function_id).hist

    def compute_window(self, function_id: str) -> Window:
        """Recompute the function's window from its histogram now (uncached)."""
        return self._compute(self._get(function_id).hist)[0]

    def window_source(self, function_id: str, t_s: float | None = None) -> str:
        """Where the current window comes from: ``histogram``, ``forecast`` or ``fallback``."""
        self.window(function_id, t_s)
        return self._get(function_id).source

    def _compute(self, h: IdleTimeHistogram) -> tuple[Window, str]:
        cfg = self.config
        if h.n_oob >= cfg.min_oob_samples and h.n_oob >= cfg.oob_fraction * h.total:
            # Mostly beyond the histogram's range: forecast the next idle time and open a
            # window of +-forecast_margin around it.
            f = h.forecast_oob_s()
            return Window(f * (1.0 - cfg.forecast_margin), 2.0 * cfg.forecast_margin * f), "forecast"
        if h.n_in < cfg.min_samples and not self._early_periodic(h):
            return self._fallback, "fallback"
        if h.cv() < cfg.cv_threshold:
            return self._fallback, "fallback"
        head = h.percentile_bin(cfg.head_percentile)
        tail = h.percentile_bin(cfg.tail_percentile)
        prewarm = head * cfg.bin_s * (1.0 - cfg.margin)  # lower edge of the head bin, minus 10 %
        end = (tail + 1) * cfg.bin_s * (1.0 + cfg.margin)  # upper edge of the tail bin, plus 10 %
        return Window(prewarm, end - prewarm), "histogram"

    def _early_periodic(self, h: IdleTimeHistogram) -> bool:
        span = self.config.early_span_bins
        if span is None or h.n_in < self.config.early_min_samples or h.n_oob:
            return False
        return h.percentile_bin(100.0) - h.percentile_bin(0.0) <= span

    def window(self, function_id: str, t_s: float | None = None) -> Window:
        """The function's current window, recomputed at most once per ``refresh_s`` of ``t_s``."""
        st = self._get(function_id)
        if st.dirty and (
            t_s is None
            or st.hist.total < 2 * self.config.min_samples
            or t_s - st.computed_at >= self.config.refresh_s
        ):
            st.window, st.source = self._compute(st.hist)
            st.dirty = False
            st.computed_at = -math.inf if t_s is None else t_s
        return st.window

    def keep_alive_s(self, function_id: str) -> float:
        return self.window(function_id).keep_alive_s

    def prewarm_after_s(self, function_id: str) -> float:
        return self.window(function_id).prewarm_s

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        w = self.window(function_id, t_s)
        if idle_instances > 0 and w.prewarm_s > 0:
            # The histogram predicts when the *next* invocation comes, not how many: one
            # instance comes back for it, extra ones are unloaded.
            return Window(0.0, 0.0)
        return w
