"""Keep-alive and pre-warm policies for function instances.

One small interface serves both the offline simulator (:mod:`controlplane.serverless.funcsim`) and
the live hub: per-function state is updated incrementally, one invocation at a time, and every
query is O(1) amortised, so the hub can call it on its hot path.

Two Protocols:

* :class:`KeepAlivePolicy` decides, when an instance finishes an invocation, whether to keep it
  loaded (``keep_alive_s``) or to unload it and load it again ``prewarm_s`` later, just before the
  next invocation is predicted (the *window* of Shahrad et al.).
* :class:`PrewarmAdvisor` learns which functions follow which (a call graph, from co-occurrence
  of arrivals only) and names the functions to pre-warm when one is invoked.

A :class:`Policy` bundles one of each (the advisor is optional); :func:`make_policy` builds the
registered ones by name (:data:`POLICY_NAMES`).

Policies:

``fixed-10m``
    Keep every instance 10 minutes after it goes idle (the Azure/OpenWhisk-style baseline).
``no-keepalive``
    Unload an instance as soon as it finishes.
``hybrid``
    The hybrid histogram policy of Shahrad et al., "Serverless in the Wild", USENIX ATC 2020:
    a per-function histogram of idle times (4 h range, 1-minute bins); the pre-warm window is
    the 5th percentile minus 10 %, the window ends at the 99th percentile plus 10 %; too little
    history or too flat a histogram (coefficient of variation of the bin counts below 2) falls
    back to a conservative keep-alive of the histogram range; when most idle times are beyond
    the range, a time-series forecast of them sets the window (the paper uses ARIMA; we use
    simple exponential smoothing, which is the optimal forecast of an ARIMA(0,1,1) process and
    is stable on the handful of samples a function has).
``edgeplane``
    ``hybrid`` (trusting a short history early when its idle times are all alike, i.e. a timer)
    with multi-instance rules: extra instances (burst capacity) are held through a long window
    only when the gaps between bursts are regular, else at most the baseline's 10 minutes; plus
    a reactive pool of standby instances after concurrency spikes (:class:`BurstPool`) and a
    call-graph pre-warmer (:class:`CallGraphAdvisor`). ``edgeplane-no-callgraph`` and
    ``edgeplane-no-pool`` switch one extra off each, so its effect can be measured.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from edgeplane_contract.errors import EdgeplaneError

__all__ = [
    "POLICY_NAMES",
    "BurstPool",
    "BurstPoolConfig",
    "CallGraphAdvisor",
    "CallGraphConfig",
    "EdgeplaneKeepAlive",
    "FixedKeepAlive",
    "HybridConfig",
    "HybridHistogramPolicy",
    "IdleTimeHistogram",
    "KeepAlivePolicy",
    "Policy",
    "PrewarmAdvisor",
    "UnknownPolicyError",
    "Window",
    "make_policy",
]


class Window(NamedTuple):
    """What to do with an instance that just went idle.

    ``prewarm_s == 0``: keep it loaded for ``keep_alive_s``. ``prewarm_s > 0``: unload it now,
    have it loaded (warm) again ``prewarm_s`` after now, and keep it ``keep_alive_s`` from then.
    ``keep_alive_s == 0`` with ``prewarm_s == 0`` means unload and do not come back.
    """

    prewarm_s: float
    keep_alive_s: float


class KeepAlivePolicy(Protocol):
    """Per-function keep-alive / pre-warm decisions, updated one invocation at a time.

    Times are seconds on one monotonic clock (the simulator's or the hub's). Calls for one
    function must come in time order; different functions are independent.
    """

    @property
    def name(self) -> str:
        """The registry name, e.g. ``"hybrid"``."""
        ...

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        """Record an invocation arriving at ``t_s`` that runs ``duration_s``.

        ``concurrency`` is the number of the function's invocations in flight including this
        one (1 when the caller does not know).
        """
        ...

    def keep_alive_s(self, function_id: str) -> float:
        """How long to keep the function's instance after the prewarm point (see :class:`Window`)."""
        ...

    def prewarm_after_s(self, function_id: str) -> float:
        """When, after the last invocation's end, to have an instance warm again (0: never unload)."""
        ...

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        """The window for one instance of ``function_id`` that goes idle at ``t_s``.

        ``idle_instances`` is how many of the function's other instances are idle (loaded or
        scheduled) at that moment; policies keep extra instances differently from the first.
        """
        ...


class PrewarmAdvisor(Protocol):
    """Learns, from arrivals alone, which functions to pre-warm when one is invoked."""

    @property
    def window_s(self) -> float:
        """A pre-warmed successor is expected within this many seconds of its trigger."""
        ...

    @property
    def episode_gap_s(self) -> float:
        """Only an invocation after a gap longer than this starts an *episode*; the advisor
        ignores other invocations, so callers may skip them (the simulator does)."""
        ...

    def observe_invocation(self, function_id: str, t_s: float) -> tuple[str, ...]:
        """Record an invocation (in global time order) and return the functions to pre-warm now."""
        ...


class UnknownPolicyError(EdgeplaneError, ValueError):
    """A policy name that is not in :data:`POLICY_NAMES`."""

    code = "unknown_policy"
    http_status = 422

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
        self.name = name


# --------------------------------------------------------------------------------------------
# Baselines


class FixedKeepAlive:
    """Keep every idle instance loaded for a fixed time (0: unload immediately)."""

    def __init__(self, keep_alive_s: float, *, name: str) -> None:
        if keep_alive_s < 0:
            raise ValueError("keep_alive_s must be >= 0")
        self._window = Window(0.0, float(keep_alive_s))
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        return None

    def keep_alive_s(self, function_id: str) -> float:
        return self._window.keep_alive_s

    def prewarm_after_s(self, function_id: str) -> float:
        return 0.0

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        return self._window


# --------------------------------------------------------------------------------------------
# Hybrid histogram (Shahrad et al., ATC 2020)


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


# --------------------------------------------------------------------------------------------
# Reactive pool for bursts


@dataclass(frozen=True, slots=True)
class BurstPoolConfig:
    """A spike is concurrency >= max(``min_concurrency``, ``spike_factor`` x its running mean).
    Instances freed within ``hold_s`` of a spike become standby, up to ``max_standby`` of them
    (or the spike's concurrency if lower): they follow the function's window, at least
    ``hold_s`` (the fixed baseline's 10 minutes)."""

    spike_factor: float = 2.0
    min_concurrency: int = 2
    max_standby: int = 4
    hold_s: float = 600.0
    ewma_alpha: float = 0.05


@dataclass(slots=True)
class _BurstState:
    mean: float = 1.0
    last_spike: float = -math.inf
    peak: int = 0


class BurstPool:
    """Tracks each function's concurrency and says how many standby instances to keep."""

    def __init__(self, config: BurstPoolConfig | None = None) -> None:
        self.config = config or BurstPoolConfig()
        self._state: dict[str, _BurstState] = {}

    def observe(self, function_id: str, t_s: float, concurrency: int) -> None:
        """Record the concurrency seen at an arrival."""
        st = self._state.get(function_id)
        if st is None:
            st = self._state[function_id] = _BurstState()
        cfg = self.config
        if concurrency >= cfg.min_concurrency and concurrency >= cfg.spike_factor * st.mean:
            recent = t_s - st.last_spike <= cfg.hold_s
            st.peak = max(st.peak, concurrency) if recent else concurrency
            st.last_spike = t_s
        st.mean += cfg.ewma_alpha * (concurrency - st.mean)

    def standby(self, function_id: str, t_s: float) -> int:
        """Idle instances to keep warm at ``t_s`` (0 when no recent spike)."""
        st = self._state.get(function_id)
        if st is None or t_s - st.last_spike > self.config.hold_s:
            return 0
        return min(self.config.max_standby, st.peak)


class EdgeplaneKeepAlive:
    """Hybrid histogram windows plus, optionally, the reactive :class:`BurstPool`."""

    def __init__(
        self,
        hybrid: HybridHistogramPolicy | None = None,
        pool: BurstPool | None = None,
        *,
        extra_keep_alive_s: float = 600.0,
        name: str = "edgeplane",
    ) -> None:
        self.hybrid = hybrid or HybridHistogramPolicy(HybridConfig(early_span_bins=2))
        self.pool = pool
        self.extra_keep_alive_s = extra_keep_alive_s
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        self.hybrid.observe_invocation(function_id, t_s, duration_s, concurrency=concurrency)
        if self.pool is not None:
            self.pool.observe(function_id, t_s, concurrency)

    def keep_alive_s(self, function_id: str) -> float:
        return self.hybrid.keep_alive_s(function_id)

    def prewarm_after_s(self, function_id: str) -> float:
        return self.hybrid.prewarm_after_s(function_id)

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        w = self.hybrid.release_window(function_id, t_s, idle_instances=idle_instances)
        if idle_instances == 0:
            # The first idle instance follows the histogram, which predicts the next arrival.
            return w
        if self.pool is not None and idle_instances < self.pool.standby(function_id, t_s):
            # Standby instances for the next burst: they follow the first instance's window
            # (pre-warmed with it when it is unloaded), and stay at least `hold_s`.
            first = self.hybrid.window(function_id, t_s)
            hold = self.pool.config.hold_s
            return first if first.prewarm_s + first.keep_alive_s > hold else Window(0.0, hold)
        # The histogram says when the next invocation comes, not how many come at once. Extra
        # instances are burst capacity: worth holding through a long window only when the gaps
        # between bursts are regular (periodic bursts); otherwise kept no longer than the baseline.
        if w.keep_alive_s > self.extra_keep_alive_s and not (
            self.hybrid.window_source(function_id, t_s) == "histogram"
            and self.hybrid.histogram(function_id).gaps_are_regular()
        ):
            return Window(w.prewarm_s, self.extra_keep_alive_s)
        return w


# --------------------------------------------------------------------------------------------
# Call-graph pre-warming


@dataclass(frozen=True, slots=True)
class CallGraphConfig:
    """``A -> B`` is learned when at least ``min_support`` of A's episodes were followed by a B
    episode within ``window_s``, that is at least ``min_confidence`` of A's episodes and at least
    ``min_lift`` times B's chance of starting an episode in any such window."""

    window_s: float = 60.0
    min_support: int = 3
    min_confidence: float = 0.5
    min_lift: float = 5.0
    max_successors: int = 64


@dataclass(slots=True)
class _Episode:
    t: float
    function_id: str
    followed: set[str] = field(default_factory=set)


class CallGraphAdvisor:
    """Online co-occurrence learner over *episodes* (an invocation after a quiet gap).

    Working on episode starts, not on every invocation, keeps it cheap for busy functions and is
    what matters for cold starts: a busy function is warm anyway; a function starting an episode
    is the one that would start cold.
    """

    def __init__(self, config: CallGraphConfig | None = None) -> None:
        self.config = config or CallGraphConfig()
        self._last: dict[str, float] = {}
        self._episodes: dict[str, int] = {}
        self._pairs: dict[str, dict[str, int]] = {}
        self._recent: deque[_Episode] = deque()
        self._t0: float | None = None

    @property
    def window_s(self) -> float:
        return self.config.window_s

    @property
    def episode_gap_s(self) -> float:
        return self.config.window_s

    def observe_invocation(self, function_id: str, t_s: float) -> tuple[str, ...]:
        last = self._last.get(function_id)
        self._last[function_id] = t_s
        if last is not None and t_s - last <= self.config.window_s:
            return ()
        return self._observe_episode(function_id, t_s)

    def _observe_episode(self, b: str, t: float) -> tuple[str, ...]:
        cfg = self.config
        if self._t0 is None:
            self._t0 = t
        recent = self._recent
        while recent and t - recent[0].t > cfg.window_s:
            recent.popleft()
        for ep in recent:
            a = ep.function_id
            if a != b and b not in ep.followed:
                ep.followed.add(b)
                succ = self._pairs.setdefault(a, {})
                succ[b] = succ.get(b, 0) + 1
                if len(succ) > cfg.max_successors:
                    self._prune(succ)
        recent.append(_Episode(t, b))
        self._episodes[b] = self._episodes.get(b, 0) + 1
        return self.successors(b, t)

    def _prune(self, succ: dict[str, int]) -> None:
        # Bound memory: keep the better-supported half (coincidental pairs have low counts).
        keep = sorted(succ.items(), key=lambda kv: kv[1], reverse=True)[: self.config.max_successors // 2]
        succ.clear()
        succ.update(keep)

    def co_occurrences(self, antecedent: str, successor: str) -> int:
        """How many of ``antecedent``'s episodes were followed by a ``successor`` episode."""
        return self._pairs.get(antecedent, {}).get(successor, 0)

    def successors(self, function_id: str, t_s: float) -> tuple[str, ...]:
        """Functions learned to follow ``function_id``, judged at time ``t_s``."""
        succ = self._pairs.get(function_id)
        if not succ:
            return ()
        cfg = self.config
        n_a = self._episodes.get(function_id, 0)
        elapsed = max(cfg.window_s, t_s - (self._t0 if self._t0 is not None else t_s))
        out = []
        for b, c in succ.items():
            if c < cfg.min_support or c < cfg.min_confidence * n_a:
                continue
            base = min(1.0, self._episodes.get(b, 0) * cfg.window_s / elapsed)
            if c >= cfg.min_lift * base * n_a:
                out.append(b)
        return tuple(out)


# --------------------------------------------------------------------------------------------
# Bundles and registry


@dataclass(slots=True)
class Policy:
    """A keep-alive policy and, optionally, a pre-warm advisor, under one name.

    The live hub calls :meth:`observe_invocation` on every invocation (in arrival order) and
    pre-warms the functions it returns; on every instance release it asks
    ``keepalive.release_window``.
    """

    name: str
    keepalive: KeepAlivePolicy
    advisor: PrewarmAdvisor | None = None

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> tuple[str, ...]:
        """Feed both parts; returns the functions to pre-warm now."""
        self.keepalive.observe_invocation(function_id, t_s, duration_s, concurrency=concurrency)
        if self.advisor is None:
            return ()
        return self.advisor.observe_invocation(function_id, t_s)


def _edgeplane(name: str, *, call_graph: bool, pool: bool) -> Policy:
    hybrid = HybridHistogramPolicy(HybridConfig(early_span_bins=2), name=name)
    ka = EdgeplaneKeepAlive(hybrid, BurstPool() if pool else None, name=name)
    return Policy(name, ka, CallGraphAdvisor() if call_graph else None)


_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fixed-10m": lambda: Policy("fixed-10m", FixedKeepAlive(600.0, name="fixed-10m")),
    "no-keepalive": lambda: Policy("no-keepalive", FixedKeepAlive(0.0, name="no-keepalive")),
    "hybrid": lambda: Policy("hybrid", HybridHistogramPolicy()),
    "edgeplane": lambda: _edgeplane("edgeplane", call_graph=True, pool=True),
    "edgeplane-no-callgraph": lambda: _edgeplane("edgeplane-no-callgraph", call_graph=False, pool=True),
    "edgeplane-no-pool": lambda: _edgeplane("edgeplane-no-pool", call_graph=True, pool=False),
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_policy(name: str) -> Policy:
    """A fresh policy (no learned state) by registry name; raises :class:`UnknownPolicyError`."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownPolicyError(name) from None
    return factory()
