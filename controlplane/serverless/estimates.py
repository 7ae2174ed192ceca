"""Running estimates the router needs, learned from measured invocations (EWMA)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["Estimates", "FunctionStats"]


def _ewma(previous: float | None, sample: float, alpha: float = 0.3) -> float:
    return sample if previous is None else (1 - alpha) * previous + alpha * sample


@dataclass(slots=True)
class FunctionStats:
    """Counters and recent latencies of one function, for the API."""

    invocations: int = 0
    cold_starts: int = 0
    errors: int = 0
    timeouts: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    cold_start_ms: deque[float] = field(default_factory=lambda: deque(maxlen=500))
    per_node: dict[str, dict[str, int]] = field(default_factory=dict)

    def record(
        self, node: str, *, cold: bool, latency_ms: float, cold_ms: float, ok: bool, timeout: bool
    ) -> None:
        self.invocations += 1
        self.latencies_ms.append(latency_ms)
        counts = self.per_node.setdefault(node, {"invocations": 0, "cold_starts": 0})
        counts["invocations"] += 1
        if cold:
            self.cold_starts += 1
            counts["cold_starts"] += 1
            self.cold_start_ms.append(cold_ms)
        if not ok:
            self.errors += 1
        if timeout:
            self.timeouts += 1

    @staticmethod
    def percentile(values: deque[float], q: float) -> float | None:
        """The ``q`` quantile, interpolated between the two nearest samples (numpy's default
        "linear" rule): the p50 of two samples is their mean, not the larger one."""
        if not values:
            return None
        ordered = sorted(values)
        position = q * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return round(ordered[low] + (ordered[high] - ordered[low]) * (position - low), 3)


class Estimates:
    """Expected execution time per function, cold start per (function, node), overhead per node."""

    def __init__(self, *, default_cold_ms: float = 300.0, default_exec_ms: float = 50.0) -> None:
        self.default_cold_ms = default_cold_ms
        self.default_exec_ms = default_exec_ms
        self._exec: dict[str, float] = {}
        self._cold: dict[tuple[str, str], float] = {}
        self._cold_any: dict[str, float] = {}
        self._net: dict[str, float] = {}

    def exec_ms(self, function: str) -> float:
        return self._exec.get(function, self.default_exec_ms)

    def cold_ms(self, function: str, node: str) -> float:
        return self._cold.get((function, node), self._cold_any.get(function, self.default_cold_ms))

    def net_ms(self, node: str) -> float:
        return self._net.get(node, 2.0)

    def observe(
        self, function: str, node: str, *, exec_ms: float, cold_ms: float | None, overhead_ms: float
    ) -> None:
        self._exec[function] = _ewma(self._exec.get(function), exec_ms)
        if cold_ms is not None:
            self._cold[(function, node)] = _ewma(self._cold.get((function, node)), cold_ms)
            self._cold_any[function] = _ewma(self._cold_any.get(function), cold_ms)
        self._net[node] = _ewma(self._net.get(node), max(0.0, overhead_ms))
