"""The ``edgeplane`` keep-alive: hybrid histogram windows with multi-instance rules, plus a
reactive pool of standby instances after concurrency spikes (:class:`BurstPool`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.serverless.hybrid import HybridConfig, HybridHistogramPolicy
from controlplane.serverless.window import Window

__all__ = ["BurstPool", "BurstPoolConfig", "EdgeplaneKeepAlive"]


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
