"""The SLA-miss risk learned from outcomes (controlplane/scheduling/sla_risk.py) and its use in
the reward: no functional form assumed, the empirical tail of observed/expected runtime per kind
and load, smoothed towards the kind's pooled tail and monotone in load."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from edgeplane_contract.objective import RewardConfig, RewardInputs, reward_terms

from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.scheduling.interference import LoadProfile
from controlplane.scheduling.model import Affinity
from controlplane.scheduling.profiles import BUILTIN_PROFILES
from controlplane.scheduling.scheduler import Scheduler
from controlplane.scheduling.sla_risk import SlaRiskEstimator, _isotonic

from .conftest import cpu_node, request

BINS = 40


def _at(load: float, seconds: float = 10.0) -> LoadProfile:
    """A replica that spent its whole life at one node load."""
    profile = [0.0] * BINS
    profile[min(BINS - 1, int(load * BINS))] = seconds
    return LoadProfile(profile)


def _feed(
    est: SlaRiskEstimator | Scheduler,
    rng: np.random.Generator,
    n: int,
    miss_share: dict[float, float],
    rest: tuple[float, float] = (0.9, 1.1),
) -> None:
    """``n`` function replicas per load in ``miss_share``; that share of them ran 2.5x long,
    the others ``rest`` times their expected runtime (uniform)."""
    for load, share in miss_share.items():
        for _ in range(n):
            ratio = 2.5 if rng.random() < share else float(rng.uniform(*rest))
            if isinstance(est, Scheduler):
                est.observe_runtime("function", 10.0, 10.0 * ratio, _at(load))
            else:
                est.observe("function", 10.0, 10.0 * ratio, _at(load))


def test_the_risk_follows_the_outcomes_per_load() -> None:
    est = SlaRiskEstimator()
    _feed(est, np.random.default_rng(3), 400, {0.15: 0.02, 0.45: 0.1, 0.85: 0.4})
    table = est.table()
    loads = np.array([0.15, 0.45, 0.85])
    risk = table.risk("function", loads, np.full(3, 1.5))
    assert risk is not None
    assert risk == pytest.approx([0.02, 0.1, 0.4], abs=0.04)
    # A looser SLA (3x the expected runtime) is missed by nobody observed.
    loose = table.risk("function", loads, np.full(3, 3.0))
    assert loose is not None and np.all(loose < 0.01)
    # Tighter than anything observed: everyone misses it.
    tight = table.risk("function", loads, np.full(3, 0.2))
    assert tight is not None and np.all(tight > 0.99)
    assert table.risk("batch", loads, np.full(3, 1.5)) is None
    assert table.observations == {"function": 1200}


def test_an_unobserved_load_borrows_the_pooled_tail_and_risk_never_falls_with_load() -> None:
    est = SlaRiskEstimator(prior_weight=30.0)
    # Misses at low load and none at high load: noise or another cause, not load; the risk
    # read at high load must not be lower than at low load.
    _feed(est, np.random.default_rng(4), 300, {0.25: 0.3, 0.75: 0.0})
    table = est.table()
    grid = np.linspace(0.0, 0.99, 50)
    risk = table.risk("function", grid, np.full(50, 1.5))
    assert risk is not None
    assert np.all(np.diff(risk) >= 0)
    # The two observed loads contradict the assumption: pooled into one level, the share of
    # all replicas that missed (15%), which the empty lowest bin reads too.
    assert risk[0] == pytest.approx(0.15, abs=0.04)


def _pool_adjacent_violators(values: list[float], weights: list[float]) -> list[float]:
    """The textbook algorithm, as the oracle of the vectorised fit."""
    blocks: list[list[float]] = []  # [mean, weight, length]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]]
    return [mean for mean, _, length in blocks for _ in range(int(length))]


def test_the_vectorised_isotonic_fit_is_pool_adjacent_violators() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        m = int(rng.integers(1, 11))
        values = rng.random((m, 5))
        weights = rng.integers(1, 200, m).astype(np.float64)
        fitted = _isotonic(values, weights)
        for column in range(5):
            expected = _pool_adjacent_violators(values[:, column].tolist(), weights.tolist())
            assert fitted[:, column] == pytest.approx(expected)


def test_unusable_outcomes_are_ignored() -> None:
    est = SlaRiskEstimator()
    assert not est.observe("function", 0.0, 1.0, _at(0.5))
    assert not est.observe("function", 1.0, math.nan, _at(0.5))
    assert not est.observe("function", 1.0, 1.0, LoadProfile([0.0] * BINS))
    assert len(est) == 0 and est.table().survival == {}
    with pytest.raises(ValueError):
        SlaRiskEstimator(load_bins=0)


def _inputs(risk: np.ndarray | None, added: np.ndarray | None = None) -> RewardInputs:
    two = np.ones(2)
    return RewardInputs(
        cpu_cap=two * 8,
        cpu_alloc=two * 2,
        mem_cap=two * 2**33,
        mem_alloc=two * 0,
        gpu_count=two * 0,
        gpu_used=two * 0,
        cpu_add=two,
        mem_add=two * 2**28,
        gpu_add=two * 0,
        sens_sum=two * 0,
        replicas=two,
        io_count=two * 0,
        idle_w=two * 50,
        max_w=two * 100,
        dynamic_w=two * 5,
        power_ref_w=100.0,
        on_battery=two * 0,
        battery_pct=two * np.nan,
        transfer_s=two * 0,
        runtime_s=10.0,
        sla_s=20.0,
        sensitivity=0.6,
        sla_risk=risk,
        sla_risk_added=added,
    )


def test_the_reward_charges_the_learned_risk_only_when_weighted() -> None:
    risk = np.array([0.05, 0.3])
    plain = reward_terms(_inputs(None), RewardConfig()).total
    weighted = RewardConfig.from_dict({"sla_risk_weight": 2.0})
    unweighted = reward_terms(_inputs(risk), RewardConfig()).total
    assert unweighted == pytest.approx(plain)  # weight 0: the risk is not read
    terms = reward_terms(_inputs(risk, np.array([0.0, 0.2])), weighted)
    assert terms.qos[0] > terms.qos[1]
    assert terms.total[0] - terms.total[1] == pytest.approx(2.0 * 2.0 * (0.5 - 0.05))
    # Its own cap: a huge weight still tells the low-risk candidate from the high one... up to 1.
    capped = reward_terms(_inputs(np.array([0.01, 0.9])), RewardConfig.from_dict({"sla_risk_weight": 50.0}))
    assert capped.qos[1] < capped.qos[0]


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_bad_risk_weight_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="sla_risk_weight"):
        RewardConfig.from_dict({"sla_risk_weight": bad})


def _profile(weight: float) -> dict[str, Any]:
    profile = copy.deepcopy(BUILTIN_PROFILES["edgeplane"])
    profile["name"] = f"edgeplane-risk-{weight:g}"
    profile["reward"]["sla_risk_weight"] = weight
    return profile


def _choice(weight: float) -> str:
    sched = Scheduler(_profile(weight), seed=0, clock=lambda: 0.0)
    for name in ("busy", "quiet"):
        sched.upsert_node(cpu_node(name, cpu=8, mem_gib=32))
    # The busy node holds 5 CPUs, the quiet one 1: both awake, no wake-up cost either way.
    for wid, cpu, node in (("b", 5, "busy"), ("q", 1, "quiet")):
        assert sched.schedule(request(wid, cpu=cpu, affinity=Affinity(nodes=[node]))).scheduled
    # Outcomes: at the busy node's load 15% of functions ran 2.5x long and the rest a little
    # faster than expected, so the mean slowdown there (about 1.15x) stays inside the SLA; at
    # low load none missed.
    rng = np.random.default_rng(5)
    _feed(sched, rng, 300, {0.2: 0.0, 0.3: 0.0}, rest=(1.0, 1.1))
    _feed(sched, rng, 300, {0.75: 0.15, 0.8: 0.15}, rest=(0.85, 0.95))
    decision = sched.schedule(
        request("f", cpu=1, kind="function", expected_runtime_s=10.0, sla_latency_s=17.0)
    )
    assert decision.scheduled
    return decision.placements[0].node


def test_a_scheduler_that_weighs_the_risk_leaves_the_node_where_functions_miss() -> None:
    assert _choice(0.0) == "busy"  # the reward's packing term alone fills the busy node
    assert _choice(3.0) == "quiet"


def test_the_live_placer_feeds_the_risk_of_a_profile_whose_interference_is_fixed() -> None:
    profile = _profile(3.0)
    profile["reward"]["interference"] = "fixed"
    placer = FrameworkPlacer(profile)
    assert placer.scheduler.interference is None and placer.interference() is None
    assert placer.observe_runtime("function", 10.0, 25.0, _at(0.5).seconds)
    table = placer.sla_risk()
    assert table is not None and table.observations == {"function": 1}
    # A profile that learns neither takes nothing.
    assert not FrameworkPlacer("default").observe_runtime("function", 10.0, 25.0, _at(0.5).seconds)
