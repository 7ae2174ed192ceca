"""The risk of missing an SLA at a given node load, learned from outcomes without a model.

The interference estimator (:mod:`.interference`) fits a mean slowdown of a fixed form (a knee).
Where the real contention has another form, or where runtimes spread widely around their
mean, that mean can stay well inside an SLA while a tenth of the replicas miss it: the
scheduler then packs a node past the load at which misses start, and nothing in its score
says so. This module assumes no form at all. Per kind it keeps the empirical distribution of
``y = observed / expected`` runtime in bins of the node's time-mean CPU allocation while the
replica ran (what agents already report), and answers ``P(y > t | kind, load)``: the chance
that a replica whose SLA allows ``t`` times its expected runtime misses it at that load.

Two assumptions only, both about the world rather than a formula: a bin with few
observations borrows from the kind's distribution over all loads (``prior_weight``
pseudo-observations), and the risk never falls as the load rises (isotonic regression over the
load bins; more load does not make work faster).

Pure and synchronous (numpy only); fed by :meth:`.scheduler.Scheduler.observe_runtime`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgeplane_contract.arrays import FloatArray

from controlplane.scheduling.interference import LoadProfile

__all__ = ["SHOWN_RATIO", "SlaRiskEstimator", "SlaRiskTable"]

#: The runtime ratio the API and the metrics read the risk at: an SLA of 1.5x the expected runtime.
SHOWN_RATIO = 1.5

#: Ratio bin edges: log-spaced over [1/4, 6] (the ratios the interference estimator accepts too).
_Y_EDGES: FloatArray = np.exp(np.linspace(math.log(0.25), math.log(6.0), 49))


@dataclass(frozen=True, slots=True)
class SlaRiskTable:
    """A snapshot of the learned risk: per kind, ``survival[l, j] = P(y > edge_j | load bin l)``."""

    load_bins: int
    survival: dict[str, FloatArray]
    observations: dict[str, int]

    def risk(self, kind: str, load: FloatArray, allowed: FloatArray) -> FloatArray | None:
        """``P(y > allowed)`` for replicas of ``kind`` at each ``load`` (CPU allocation share,
        0..1), elementwise; None where the kind has not been observed."""
        table = self.survival.get(kind)
        if table is None:
            return None
        rows = np.clip((np.asarray(load) * self.load_bins).astype(np.int64), 0, self.load_bins - 1)
        # Column j holds the survival at edge j; read it at the last edge at or below ``allowed``
        # (the larger of the two risks around it: a conservative read between edges).
        cols = np.clip(np.searchsorted(_Y_EDGES, np.asarray(allowed), side="right") - 1, 0, len(_Y_EDGES) - 1)
        result: FloatArray = table[rows, cols]
        return result

    def by_load(self, ratio: float, parts: int = 10) -> dict[str, list[float]]:
        """Per kind, the risk of running longer than ``ratio`` times the expected runtime at the
        middle of each of ``parts`` equal parts of node load (what the API and metrics show)."""
        loads = (np.arange(parts) + 0.5) / parts
        out: dict[str, list[float]] = {}
        for kind in sorted(self.survival):
            risk = self.risk(kind, loads, np.full(parts, ratio))
            out[kind] = [] if risk is None else [float(r) for r in risk]
        return out


def _isotonic(values: FloatArray, weights: FloatArray) -> FloatArray:
    """Per column of ``values`` (rows in load order), the weighted least-squares non-decreasing
    fit: ``fit[i] = max over a <= i of min over b >= i of mean(values[a..b])`` (the max-min form
    of isotonic regression; a handful of load bins, so the cubic table is small)."""
    m = len(weights)
    sums = np.vstack([np.zeros((1, values.shape[1])), np.cumsum(weights[:, None] * values, axis=0)])
    mass = np.concatenate([[0.0], np.cumsum(weights)])
    first = np.arange(m)[:, None]
    last = np.arange(m)[None, :]
    valid = (last >= first)[:, :, None]
    span = np.where(last >= first, mass[last + 1] - mass[first], 1.0)[:, :, None]
    means = np.where(valid, (sums[last + 1] - sums[first]) / span, np.inf)  # (first, last, column)
    lowest_after = np.minimum.accumulate(means[:, ::-1], axis=1)[:, ::-1]  # min over last >= i
    fitted: FloatArray = np.where(valid, lowest_after, -np.inf).max(axis=0)
    return fitted


class SlaRiskEstimator:
    """Counts completed replicas per kind, load bin and runtime-ratio bin."""

    def __init__(self, load_bins: int = 10, prior_weight: float = 30.0) -> None:
        if load_bins < 1 or prior_weight <= 0:
            raise ValueError("load_bins must be >= 1 and prior_weight > 0")
        self.load_bins = load_bins
        self.prior_weight = prior_weight
        self._counts: dict[str, FloatArray] = {}  # kind -> (load_bins, len(_Y_EDGES) + 1)
        self._n = 0

    def observe(self, kind: str, expected_s: float, observed_s: float, load: LoadProfile) -> bool:
        """Add one completed replica; False (ignored) if it says nothing usable."""
        seconds = np.asarray(load.seconds, dtype=np.float64)
        total = float(seconds.sum())
        if not (expected_s > 0 and observed_s > 0 and total > 0 and math.isfinite(observed_s)):
            return False
        mid = (np.arange(len(seconds)) + 0.5) / len(seconds)
        mean_load = float(mid @ seconds) / total
        row = min(int(mean_load * self.load_bins), self.load_bins - 1)
        # Column j: the number of edges the ratio exceeds (0: at or below the first edge).
        col = int(np.searchsorted(_Y_EDGES, observed_s / expected_s, side="left"))
        counts = self._counts.get(kind)
        if counts is None:
            counts = self._counts[kind] = np.zeros((self.load_bins, len(_Y_EDGES) + 1))
        counts[row, col] += 1.0
        self._n += 1
        return True

    def table(self) -> SlaRiskTable:
        """The current risk per kind: each observed load bin's tail, shrunk towards the kind's
        pooled tail by ``prior_weight`` pseudo-observations, made non-decreasing in load by
        isotonic regression (weighted by observations); a load bin with none reads the nearest
        observed bin below it (above it, for the lowest)."""
        survival: dict[str, FloatArray] = {}
        observations: dict[str, int] = {}
        for kind, counts in self._counts.items():
            # Observations above edge j, per load bin: a reversed cumulative sum over columns.
            above = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1][:, 1:]  # (L, E)
            n = counts.sum(axis=1)  # (L,)
            pooled = above.sum(axis=0) / max(float(n.sum()), 1.0)  # (E,)
            seen = np.flatnonzero(n > 0)
            weights = n[seen] + self.prior_weight
            smoothed = (above[seen] + self.prior_weight * pooled[None, :]) / weights[:, None]
            fitted = _isotonic(smoothed, weights)
            # Each load bin reads the last observed bin at or below it (the first, below that).
            source = np.clip(np.searchsorted(seen, np.arange(self.load_bins), side="right") - 1, 0, None)
            survival[kind] = fitted[source]
            observations[kind] = int(n.sum())
        return SlaRiskTable(self.load_bins, survival, observations)

    def __len__(self) -> int:
        return self._n
