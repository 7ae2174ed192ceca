"""The reward: its components, the adaptive energy weight, and scalar == vectorised."""

from __future__ import annotations

import numpy as np
import pytest

from edgeplane_contract.objective import (
    NodeSnapshot,
    RewardConfig,
    energy_weight,
    reward,
)


def node(**kw):
    base = dict(
        cpu_cap=64,
        cpu_alloc=16,
        mem_cap=256e9,
        mem_alloc=64e9,
        replicas=2,
        idle_w=160,
        max_w=420,
        cpu_dynamic_w_per_core=260 / 64,
        power_ref_w=1250,
    )
    base.update(kw)
    return NodeSnapshot(**base)


def r(state, cfg=None, **kw):
    args = dict(cpu=8, memory=8e9, gpu_units=0.0, kind="batch", runtime_s=600.0, sla_s=None)
    args.update(kw)
    # The mechanics at a fixed knee of 0.70 (the default knee is only a prior now).
    return reward(state, cfg=cfg or RewardConfig(knee=0.70), **args)


def test_filling_a_node_below_the_knee_raises_utilisation_reward():
    assert r(node(cpu_alloc=32)).util > r(node(cpu_alloc=0)).util


def test_utilisation_beyond_the_knee_earns_nothing_more_on_cpu():
    a = r(node(cpu_alloc=40, mem_alloc=0), cpu=4)  # 44/64 = 0.69 < knee 0.70
    b = r(node(cpu_alloc=50, mem_alloc=0), cpu=4)  # 54/64 = 0.84
    assert b.util == pytest.approx(a.util + (4e9 * 0) / 256e9, abs=0.01)
    assert b.qos < a.qos  # and contention now costs QoS


def test_contention_harms_neighbours_in_proportion_to_their_sensitivity():
    calm = r(node(cpu_alloc=40, sens_sum=0.0), cpu=16)
    crowded = r(node(cpu_alloc=40, sens_sum=3.0), cpu=16)
    assert crowded.qos < calm.qos


def test_a_predicted_sla_miss_is_penalised():
    ok = r(node(), kind="service", runtime_s=10, sla_s=30)
    late = r(node(transfer_s=40), kind="service", runtime_s=10, sla_s=30)
    assert late.qos == -1.0 and ok.qos > late.qos
    assert late.predicted_latency_s == pytest.approx(50.0)


def test_waking_an_empty_node_costs_its_idle_power():
    empty = r(node(replicas=0, cpu_alloc=0, mem_alloc=0))
    busy = r(node())
    assert empty.energy < busy.energy
    assert busy.energy == pytest.approx(-(260 / 64 * 8) / 1250)
    assert empty.energy == pytest.approx(-(260 / 64 * 8 + 160) / 1250)


def test_over_commit_is_a_penalty():
    assert r(node(cpu_alloc=60), cpu=8).penalty == pytest.approx(4 / 64)
    assert r(node()).penalty == 0.0


def test_energy_weight_rises_on_battery_and_as_it_drains():
    cfg = RewardConfig.from_dict(
        {"weights": {"w3": 1.0}, "adaptive": {"battery_multiplier": 2.0, "low_battery_gain": 3.0}}
    )
    w = energy_weight(cfg, np.array([0.0, 1.0, 1.0, 1.0]), np.array([np.nan, 100.0, 50.0, 0.0]))
    assert w.tolist() == [1.0, 2.0, 5.0, 8.0]
    fixed = RewardConfig.from_dict({"adaptive": {"enabled": False}})
    assert energy_weight(fixed, np.array([1.0]), np.array([5.0])).tolist() == [1.0]


def test_total_follows_the_weighted_formula():
    cfg = RewardConfig.from_dict({"weights": {"util": 1.5, "qos": 2.0, "energy": 0.5, "penalty": 4.0}})
    b = r(node(cpu_alloc=60, on_battery=False), cfg, cpu=8)
    assert b.total == pytest.approx(1.5 * b.util + 2.0 * b.qos + 0.5 * b.energy - 4.0 * b.penalty)


def test_low_battery_node_is_a_constraint_violation():
    b = r(node(on_battery=True, battery_pct=5.0))
    assert b.penalty == 1.0


def test_reward_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown reward key"):
        RewardConfig.from_dict({"wieghts": {}})
    with pytest.raises(ValueError, match="knee"):
        RewardConfig.from_dict({"knee": 1.5})
    with pytest.raises(ValueError, match=">= 0"):
        RewardConfig.from_dict({"weights": {"qos": -1}})


def test_scheduler_reward_of_matches_the_plugin_score(mk):
    s = mk.scheduler("edgeplane", nodes=[mk.cpu_node("a"), mk.cpu_node("b")])
    req = mk.request("w", cpu=4, mem_gib=8, kind="service", sla_latency_s=30, expected_runtime_s=10)
    d = s.schedule(req)
    chosen = d.explanation.replicas[0].chosen
    s.release("w")
    again = s.reward_of(req, chosen.node, d.placements[0].assignment)
    assert again.total == pytest.approx(chosen.reward.total)
