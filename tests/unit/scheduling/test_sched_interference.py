"""The interference estimator recovers known physics from simulated observations (table tests).

Observations are drawn the way the simulator produces them: a replica spends its life at a few
node loads, its true slowdown is ``(1 + s * c(u)) * (1 + p * io_others)`` averaged over that
life, and the expected runtime it is compared with carries lognormal estimate error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from controlplane.scheduling.interference import (
    InterferenceEstimator,
    InterferencePrior,
    LoadProfile,
)
from controlplane.scheduling.scheduler import Scheduler

BINS = 40
KINDS = ("service", "analytics", "batch")


def _observe(
    est: InterferenceEstimator,
    rng: np.random.Generator,
    n: int,
    *,
    knee: float,
    sens: dict[str, float],
    io_penalty: float,
    error: float,
) -> None:
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        seconds = np.zeros(BINS)
        rate_time = 0.0
        io_others = float(rng.integers(0, 3)) if kind == "analytics" else 0.0
        for _ in range(3):  # three load phases during its life
            u = float(rng.uniform(0.3, 1.0))
            dt = float(rng.uniform(5.0, 50.0))
            seconds[min(BINS - 1, int(u * BINS))] += dt
            mid = (min(BINS - 1, int(u * BINS)) + 0.5) / BINS
            c = min(1.0, max(0.0, (mid - knee) / (1.0 - knee)))
            rate_time += dt * (1.0 + sens[kind] * c)
        observed = float(seconds.sum())
        slowdown = rate_time / observed * (1.0 + io_penalty * io_others)
        solo = observed / slowdown
        expected = solo * math.exp(error * float(rng.standard_normal()))
        est.observe(kind, expected, observed, LoadProfile(seconds.tolist(), io_others))


PRIOR = InterferencePrior(knee=0.8, sensitivity={k: 0.6 for k in KINDS}, io_penalty=0.1)

# (true knee, true sensitivities, true io penalty, estimate error, observations, tolerance on each
# sensitivity, tolerance on the knee)
RECOVERY = [
    (0.70, {"service": 1.0, "analytics": 0.5, "batch": 0.3}, 0.15, 0.2, 3000, 0.15, 0.05),
    (0.64, {"service": 1.5, "analytics": 0.7, "batch": 0.2}, 0.17, 0.2, 3000, 0.15, 0.05),
    (0.85, {"service": 0.7, "analytics": 0.3, "batch": 0.1}, 0.05, 0.1, 3000, 0.15, 0.05),
    (0.60, {"service": 1.2, "analytics": 0.9, "batch": 0.5}, 0.25, 0.4, 6000, 0.25, 0.075),
]


@pytest.mark.parametrize(("knee", "sens", "io", "error", "n", "tol", "knee_tol"), RECOVERY)
def test_many_observations_recover_the_truth(
    knee: float, sens: dict[str, float], io: float, error: float, n: int, tol: float, knee_tol: float
) -> None:
    est = InterferenceEstimator(PRIOR)
    _observe(est, np.random.default_rng(1), n, knee=knee, sens=sens, io_penalty=io, error=error)
    fit = est.estimate()
    assert abs(fit.knee - knee) <= knee_tol
    for kind, truth in sens.items():
        assert abs(fit.sensitivity[kind] - truth) <= tol, (kind, fit.sensitivity[kind], truth)
        assert fit.sensitivity_sd[kind] < 0.15
    assert abs(fit.io_penalty - io) <= 0.06
    assert fit.observations == {k: n // 3 for k in KINDS}


@pytest.mark.parametrize("n", [0, 3, 9])
def test_few_observations_leave_the_prior_in_charge(n: int) -> None:
    est = InterferenceEstimator(PRIOR)
    truth = {"service": 1.5, "analytics": 0.7, "batch": 0.2}
    _observe(est, np.random.default_rng(2), n, knee=0.64, sens=truth, io_penalty=0.2, error=0.3)
    fit = est.estimate()
    assert fit.knee == pytest.approx(0.8, abs=0.1)
    for kind in KINDS:
        assert fit.sensitivity[kind] == pytest.approx(0.6, abs=0.35)
        assert fit.sensitivity_sd[kind] > 0.2  # still unsure


def test_uncertainty_shrinks_with_observations() -> None:
    sds = []
    for n in (30, 300, 3000):
        est = InterferenceEstimator(PRIOR)
        _observe(
            est,
            np.random.default_rng(3),
            n,
            knee=0.7,
            sens={"service": 1.0, "analytics": 0.5, "batch": 0.3},
            io_penalty=0.15,
            error=0.2,
        )
        sds.append(est.estimate().sensitivity_sd["service"])
    assert sds[0] > sds[1] > sds[2]


def test_unusable_observations_are_ignored() -> None:
    est = InterferenceEstimator(PRIOR)
    assert not est.observe("service", 0.0, 10.0, LoadProfile([1.0] * BINS))
    assert not est.observe("service", 10.0, 10.0, LoadProfile([0.0] * BINS))
    assert len(est) == 0


def test_a_learning_profile_feeds_its_scores_and_a_fixed_one_does_not() -> None:
    learned = Scheduler("edgeplane")
    fixed = Scheduler("edgeplane-static")
    assert learned.interference is not None and fixed.interference is None
    seconds = [0.0] * BINS
    seconds[BINS - 1] = 10.0  # a full node
    for _ in range(learned.interference_refresh * 4):
        for sched in (learned, fixed):
            sched.observe_runtime("batch", 10.0, 10.0, LoadProfile(seconds))  # no slowdown at all
    assert learned.plugins.reward_config.sensitivity["batch"] < 0.2
    assert learned.ledger.kind_sensitivity["batch"] < 0.2
    assert fixed.plugins.reward_config.sensitivity["batch"] == 0.6
