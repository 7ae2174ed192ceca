"""Call-graph pre-warming: learns, from the co-occurrence of arrivals alone, which functions
follow which, and names the ones to pre-warm when one is invoked."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["CallGraphAdvisor", "CallGraphConfig"]


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
