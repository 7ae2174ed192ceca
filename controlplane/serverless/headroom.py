"""Headroom: a spare instance started ahead of an arrival that is predicted to overlap.

Most of the cold starts a histogram policy leaves on rarely invoked functions are not arrivals
after a long gap but arrivals while the function's only warm instance is busy: two or three calls
within a minute, the second one finding the first still running (on the Azure Functions 2019
1,000-function sample, 129 of the 161 functions above the target's cold-start rate under
``hybrid``). The histogram predicts *when* the next invocation comes, not *how many* come at once.

:class:`OverlapPredictor` predicts, per function, the probability that the next arrival comes
while earlier work is still in flight: a Beta-Bernoulli posterior over the function's own
arrivals (each one either found another invocation in flight or did not), starting from a prior
of ``prior_overlaps : prior_gaps`` (1 : 1, so a function with no history is given an even chance).
When an arrival takes the last free instance and the posterior is at least ``threshold``, one
spare instance is started now; it is held ``max(min_hold_s, hold_factor x`` the function's mean
execution time ``)`` (the time within which an overlapping arrival would come) and then unloaded
unless it was used. Execution times are folded in one arrival late, so the prediction never uses
the duration of the invocation it is made for.

The simulator (:mod:`~controlplane.serverless.funcsim`) and the live hub
(:mod:`~controlplane.serverless.warmth`) ask the same :meth:`OverlapPredictor.spare_hold_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HeadroomConfig", "OverlapPredictor"]


@dataclass(frozen=True, slots=True)
class HeadroomConfig:
    """Parameters of :class:`OverlapPredictor` (chosen at seed 1 of the Azure sample; see
    docs/bench-serverless.md for the held-out seeds)."""

    prior_overlaps: float = 1.0
    prior_gaps: float = 1.0
    threshold: float = 0.2
    min_hold_s: float = 60.0
    hold_factor: float = 2.0
    duration_alpha: float = 0.3

    def __post_init__(self) -> None:
        if self.prior_overlaps <= 0 or self.prior_gaps <= 0:
            raise ValueError("the prior's counts must be > 0")
        if not 0 <= self.threshold <= 1:
            raise ValueError("threshold must be in [0, 1]")
        if self.min_hold_s < 0 or self.hold_factor < 0:
            raise ValueError("min_hold_s and hold_factor must be >= 0")
        if not 0 < self.duration_alpha <= 1:
            raise ValueError("duration_alpha must be in (0, 1]")


class _State:
    __slots__ = ("arrivals", "duration_s", "overlaps", "pending_duration_s")

    def __init__(self) -> None:
        self.arrivals = 0
        self.overlaps = 0
        self.duration_s = 0.0  # exponentially weighted mean of past execution times
        self.pending_duration_s: float | None = None  # the latest arrival's, folded at the next


class OverlapPredictor:
    """Per function: how likely the next arrival overlaps work in flight, and whether to start a
    spare instance for it (see the module docstring). O(1) per call."""

    def __init__(self, config: HeadroomConfig | None = None) -> None:
        self.config = config or HeadroomConfig()
        self._state: dict[str, _State] = {}

    def observe(self, function_id: str, t_s: float, duration_s: float, *, concurrency: int) -> None:
        """An arrival of ``function_id``; ``concurrency`` counts it and the invocations in flight."""
        st = self._state.get(function_id)
        if st is None:
            st = self._state[function_id] = _State()
        if st.pending_duration_s is not None:
            d = st.pending_duration_s
            a = self.config.duration_alpha
            st.duration_s = d if st.duration_s == 0.0 else a * d + (1.0 - a) * st.duration_s
        st.pending_duration_s = max(0.0, duration_s)
        if st.arrivals:  # the first arrival has nothing before it to overlap
            st.overlaps += concurrency >= 2
        st.arrivals += 1

    def overlap_probability(self, function_id: str) -> float:
        """Posterior mean of P(an arrival finds work in flight); the prior's for an unseen function."""
        cfg = self.config
        st = self._state.get(function_id)
        judged = max(0, st.arrivals - 1) if st is not None else 0
        overlaps = st.overlaps if st is not None else 0
        return (overlaps + cfg.prior_overlaps) / (judged + cfg.prior_overlaps + cfg.prior_gaps)

    def spare_hold_s(self, function_id: str, *, free_instances: int) -> float:
        """Seconds to hold a spare instance started now (0: start none). Asked right after an
        arrival took an instance; ``free_instances`` are the function's instances still free or
        loading (spares included)."""
        if free_instances > 0 or self.overlap_probability(function_id) < self.config.threshold:
            return 0.0
        st = self._state.get(function_id)
        mean = st.duration_s if st is not None else 0.0
        return max(self.config.min_hold_s, self.config.hold_factor * mean)
