"""Online interference estimation: how much each kind of work slows down on a loaded node.

The reward's interference model (``edgeplane_contract/objective.py``) predicts a replica's
slowdown as ``1 + s_kind * max(0, u - knee) / (1 - knee)`` (times ``1 + io_penalty`` per other
I/O-heavy replica for I/O-heavy kinds). The constants are not known in advance: they depend on
the hardware and the co-located work. This module fits them from what agents observe at each
completion: the replica's observed runtime against its expected solo runtime, and how long the
node spent at each CPU load (and beside how many I/O-heavy neighbours) while it ran.

Model, per kind and per candidate knee ``k`` on a grid: Bayesian linear regression

    y = observed / expected = b * (1 + s * x_k) * (1 + p * z) + noise,   noise ~ N(0, noise_sd^2)

with ``x_k`` the time-mean of ``max(0, u - k) / (1 - k)`` over the replica's life, ``z`` the
time-mean number of other I/O-heavy replicas (0 for other kinds), fitted as the linear model
``y = b0 + b1 x + b2 z + b3 x z`` with a Gaussian prior; ``s = b1 / b0`` and ``p = b2 / b0``
(``b = b0`` absorbs a biased runtime estimate: lognormal error of sigma inflates y by
``exp(sigma^2 / 2)``, which would otherwise read as interference). Sufficient statistics are kept per knee,
so the knee is chosen by the largest marginal likelihood summed over kinds plus a Gaussian log
prior around the prior knee. With no observations the estimate is the prior.

Pure and synchronous (numpy only); the scheduler feeds it (:meth:`Scheduler.observe_runtime`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgeplane_contract.arrays import FloatArray

__all__ = ["KNEE_GRID", "InterferenceEstimate", "InterferenceEstimator", "InterferencePrior", "LoadProfile"]

#: Candidate knees (0.50 .. 0.90 in steps of 0.025).
KNEE_GRID: tuple[float, ...] = tuple(round(0.5 + 0.025 * i, 3) for i in range(17))

# Observed/expected ratios outside this range are clipped: a replica stuck in a retry loop or a
# wildly wrong estimate should not pull the fit more than any other single observation.
_Y_RANGE = (0.25, 6.0)


@dataclass(frozen=True, slots=True)
class InterferencePrior:
    """The belief before any observation: means and standard deviations."""

    knee: float = 0.80
    knee_sd: float = 0.10
    sensitivity: Mapping[str, float] = field(default_factory=dict)
    default_sensitivity: float = 0.6
    sensitivity_sd: float = 0.5
    io_penalty: float = 0.1
    io_penalty_sd: float = 0.1
    intercept_sd: float = 0.2
    noise_sd: float = 0.3
    io_heavy_kinds: frozenset[str] = frozenset({"analytics"})


@dataclass(frozen=True, slots=True)
class LoadProfile:
    """What the node looked like while the replica ran.

    ``seconds[j]``: time spent with the node's CPU allocation in bin ``j`` of ``len(seconds)``
    equal bins of [0, 1]; ``io_others``: the time-mean number of other I/O-heavy replicas.
    """

    seconds: Sequence[float]
    io_others: float = 0.0


@dataclass(frozen=True, slots=True)
class InterferenceEstimate:
    """The current fit: what the reward should use, with its uncertainty."""

    knee: float
    sensitivity: dict[str, float]
    sensitivity_sd: dict[str, float]
    io_penalty: float
    io_penalty_sd: float
    observations: dict[str, int]


@dataclass(slots=True)
class _Stats:
    """Sufficient statistics of one kind, one row per candidate knee."""

    xtx: FloatArray  # (K, 4, 4)
    xty: FloatArray  # (K, 4)
    yy: float = 0.0
    n: int = 0


class InterferenceEstimator:
    """Fits knee, per-kind sensitivity and the I/O penalty from completed replicas."""

    def __init__(self, prior: InterferencePrior | None = None, knees: Sequence[float] = KNEE_GRID) -> None:
        self.prior = prior or InterferencePrior()
        self.knees = np.asarray(knees, dtype=np.float64)
        self._stats: dict[str, _Stats] = {}
        self._bins_cache: dict[int, FloatArray] = {}

    def _contention_matrix(self, bins: int) -> FloatArray:
        """(K, bins): the contention of each bin's midpoint under each candidate knee."""
        m = self._bins_cache.get(bins)
        if m is None:
            mid = (np.arange(bins) + 0.5) / bins
            k = self.knees[:, None]
            m = np.clip((mid[None, :] - k) / (1.0 - k), 0.0, 1.0)
            self._bins_cache[bins] = m
        return m

    def observe(self, kind: str, expected_s: float, observed_s: float, load: LoadProfile) -> bool:
        """Add one completed replica; False (ignored) if it says nothing usable."""
        seconds = np.asarray(load.seconds, dtype=np.float64)
        total = float(seconds.sum())
        if not (expected_s > 0 and observed_s > 0 and total > 0 and math.isfinite(observed_s)):
            return False
        y = min(max(observed_s / expected_s, _Y_RANGE[0]), _Y_RANGE[1])
        x = self._contention_matrix(len(seconds)) @ seconds / total
        z = load.io_others if kind in self.prior.io_heavy_kinds else 0.0
        feats = np.stack([np.ones_like(x), x, np.full_like(x, z), x * z], axis=1)  # (K, 4)
        st = self._stats.get(kind)
        if st is None:
            k = len(self.knees)
            st = self._stats[kind] = _Stats(np.zeros((k, 4, 4)), np.zeros((k, 4)))
        st.xtx += feats[:, :, None] * feats[:, None, :]
        st.xty += feats * y
        st.yy += y * y
        st.n += 1
        return True

    def _prior_of(self, kind: str) -> tuple[FloatArray, FloatArray]:
        p = self.prior
        s = p.sensitivity.get(kind, p.default_sensitivity)
        mean = np.array([1.0, s, p.io_penalty, s * p.io_penalty])
        sds = np.array([p.intercept_sd, p.sensitivity_sd, p.io_penalty_sd, p.sensitivity_sd])
        precision = np.diag(1.0 / sds**2)
        return mean, precision

    def _posterior(self, kind: str, st: _Stats) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per knee: posterior means (K, 4), covariances (K, 4, 4) and log evidence (K,)."""
        mu0, lam0 = self._prior_of(kind)
        s2 = self.prior.noise_sd**2
        lam_n = lam0[None] + st.xtx / s2
        rhs = (lam0 @ mu0)[None] + st.xty / s2
        mu_n = np.linalg.solve(lam_n, rhs[..., None])[..., 0]
        _, logdet0 = np.linalg.slogdet(lam0)
        _, logdet_n = np.linalg.slogdet(lam_n)
        quad = st.yy / s2 + mu0 @ lam0 @ mu0 - np.einsum("ki,kij,kj->k", mu_n, lam_n, mu_n)
        evidence = -0.5 * st.n * math.log(2 * math.pi * s2) + 0.5 * (logdet0 - logdet_n) - 0.5 * quad
        cov: FloatArray = np.asarray(np.linalg.inv(lam_n), dtype=np.float64)
        return np.asarray(mu_n, dtype=np.float64), cov, np.asarray(evidence, dtype=np.float64)

    def estimate(self) -> InterferenceEstimate:
        """The MAP knee and, at that knee, each observed kind's posterior (prior elsewhere)."""
        p = self.prior
        fits = {kind: self._posterior(kind, st) for kind, st in self._stats.items()}
        score = -0.5 * ((self.knees - p.knee) / p.knee_sd) ** 2
        for _, _, evidence in fits.values():
            score = score + evidence
        best = int(np.argmax(score))
        knee = float(self.knees[best]) if fits else p.knee
        sens = dict(p.sensitivity)
        sens_sd = {kind: p.sensitivity_sd for kind in sens}
        io, io_sd = p.io_penalty, p.io_penalty_sd
        for kind, (mu, cov, _) in fits.items():
            # Ratios to the intercept; their sd to first order (the intercept is well pinned).
            b = max(float(mu[best, 0]), 0.25)
            sens[kind] = max(0.0, float(mu[best, 1]) / b)
            sens_sd[kind] = math.sqrt(max(0.0, float(cov[best, 1, 1]))) / b
            if kind in p.io_heavy_kinds:
                io = max(0.0, float(mu[best, 2]) / b)
                io_sd = math.sqrt(max(0.0, float(cov[best, 2, 2]))) / b
        return InterferenceEstimate(
            knee=knee,
            sensitivity=sens,
            sensitivity_sd=sens_sd,
            io_penalty=io,
            io_penalty_sd=io_sd,
            observations={kind: st.n for kind, st in self._stats.items()},
        )

    def __len__(self) -> int:
        return sum(st.n for st in self._stats.values())
