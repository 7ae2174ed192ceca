"""Each plugin's score or filter on small tables, against the formulas they implement."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.scheduling.actions import ActionSpace
from controlplane.scheduling.framework import STATE_NOW, CycleState
from controlplane.scheduling.model import Affinity, AntiAffinity, Assignment
from controlplane.scheduling.plugins.registry import REGISTRY


def plugin(name, sched, args=None):
    return REGISTRY[name](args or {}, sched)


def candidates(sched, req, rows=None):
    space = ActionSpace()
    actions = space.analyse(sched.nodes, req.resources)
    rows = np.arange(len(sched.nodes)) if rows is None else np.array(rows)
    return space.candidates(sched.nodes, req.resources, actions, rows)


def place(sched, node, cpu, mem_gib, wid="x", replica=0, **kw):
    from controlplane.scheduling.ledger import Allocation

    sched.ledger.add(Allocation(wid, replica, node, Assignment(cpu=cpu, memory=int(mem_gib * 2**30), **kw)))


def test_least_allocated_uses_kube_integer_formula(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=4, mem_gib=8), mk.cpu_node("b", cpu=4, mem_gib=8)])
    place(s, "b", 2, 4)
    req = mk.request("w", cpu=1, mem_gib=2)
    raw = plugin("NodeResourcesLeastAllocated", s).score(CycleState(), req, candidates(s, req))
    # a: cpu (4-1)*100/4=75, mem (8-2)*100/8=75 -> 75; b: cpu 25, mem 25 -> 25
    assert raw.tolist() == [75.0, 25.0]


def test_most_allocated_prefers_the_fuller_node(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=4, mem_gib=8), mk.cpu_node("b", cpu=4, mem_gib=8)])
    place(s, "b", 2, 4)
    req = mk.request("w", cpu=1, mem_gib=2)
    raw = plugin("NodeResourcesMostAllocated", s).score(CycleState(), req, candidates(s, req))
    assert raw.tolist() == [25.0, 75.0]


def test_balanced_allocation_is_one_minus_half_the_fraction_gap(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=10, mem_gib=10)])
    req = mk.request("w", cpu=5, mem_gib=1)
    raw = plugin("NodeResourcesBalancedAllocation", s).score(CycleState(), req, candidates(s, req))
    assert raw.tolist() == [np.floor((1 - abs(0.5 - 0.1) / 2) * 100)]


@pytest.mark.parametrize("used_cpu", [0, 2, 6])
def test_volcano_binpack_averages_requested_resources(mk, used_cpu):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8, mem_gib=8)])
    place(s, "a", used_cpu, 0.000001)
    req = mk.request("w", cpu=2, mem_gib=2)
    raw = plugin("VolcanoBinpack", s).score(CycleState(), req, candidates(s, req))
    cpu_score = (used_cpu + 2) / 8
    mem_score = 2 / 8
    assert raw[0] == pytest.approx((cpu_score + mem_score) / 2 * 100, rel=1e-6)


def test_volcano_binpack_gives_zero_for_a_resource_that_would_overflow(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8, mem_gib=8)])
    req = mk.request("w", cpu=2, mem_gib=2)
    cand = candidates(s, req)
    cand.cpu[:] = 9  # as if the quota were 9 cores on an 8-core node
    raw = plugin("VolcanoBinpack", s, {"cpu": 3, "memory": 1}).score(CycleState(), req, cand)
    assert raw[0] == pytest.approx((0 * 3 + 2 / 8 * 1) / 4 * 100)


def test_pod_topology_spread_prefers_domains_without_replicas(mk):
    nodes = [mk.cpu_node("a", zone="z1"), mk.cpu_node("b", zone="z1"), mk.cpu_node("c", zone="z2")]
    s = mk.scheduler(nodes=nodes)
    place(s, "a", 1, 1, wid="w", replica=0)
    p = plugin("PodTopologySpread", s)
    req = mk.request("w", replicas=2)
    raw = p.score(CycleState(), req, candidates(s, req))
    norm = p.normalize(CycleState(), raw)
    assert norm[2] == 100.0  # other zone, no replica
    assert norm[0] < norm[1] < norm[2]  # same host is worst, same zone next


def test_node_affinity_filters_and_prefers(mk):
    nodes = [
        mk.cpu_node("a", cluster="c1", region="r1", labels={"disk": "ssd"}),
        mk.cpu_node("b", cluster="c2", region="r2"),
        mk.cpu_node("c", cluster="c1", region="r1"),
    ]
    s = mk.scheduler(nodes=nodes)
    p = plugin("NodeAffinity", s)

    def rejected(req):
        mask = np.zeros(3, dtype=bool)
        for r in p.filter(CycleState(), req, s.nodes):
            mask |= r.mask
        return mask.tolist()

    assert rejected(mk.request("w", affinity=Affinity(clusters=["c1"]))) == [False, True, False]
    assert rejected(mk.request("w", affinity=Affinity(regions=["r2"]))) == [True, False, True]
    assert rejected(mk.request("w", affinity=Affinity(node_labels={"disk": "ssd"}))) == [False, True, True]
    assert rejected(mk.request("w", anti_affinity=AntiAffinity(nodes=["c"]))) == [False, False, True]
    assert rejected(mk.request("w", anti_affinity=AntiAffinity(regions=["r1"]))) == [True, False, True]
    assert rejected(mk.request("w", anti_affinity=AntiAffinity(clusters=["c2"]))) == [False, True, False]
    req = mk.request("w", affinity=Affinity(preferred_labels={"disk": "ssd"}))
    assert p.normalize(CycleState(), p.score(CycleState(), req, candidates(s, req))).tolist() == [100, 0, 0]


def test_node_ready_rejects_unready_nodes(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a"), mk.cpu_node("b", ready=False)])
    (rej,) = plugin("NodeReady", s).filter(CycleState(), mk.request("w"), s.nodes)
    assert rej.mask.tolist() == [False, True]


def test_gpu_fragmentation_keeps_gpu_pairs_and_gpu_nodes_free(mk):
    s = mk.scheduler(nodes=[mk.gpu_node("g0"), mk.gpu_node("g1"), mk.cpu_node("c")])
    place(s, "g1", 1, 1, gpus=(0,))
    p = plugin("GpuFragmentation", s)
    req = mk.request("w", gpu=1)
    cand = candidates(s, req, rows=[0, 1])
    norm = p.normalize(CycleState(), p.score(CycleState(), req, cand))
    assert norm[1] > norm[0]  # take the half-used node, keep g0's pair for a 2-GPU job
    cpu_req = mk.request("cpu", cpu=16, mem_gib=64)
    cand = candidates(s, cpu_req)
    norm = p.normalize(CycleState(), p.score(CycleState(), cpu_req, cand))
    assert norm[2] > norm[0]  # CPU-only work prefers the CPU node


def test_energy_prefers_a_busy_node_over_waking_an_idle_one(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("idle"), mk.cpu_node("busy")])
    place(s, "busy", 4, 4)
    p = plugin("Energy", s)
    req = mk.request("w", cpu=2)
    norm = p.normalize(CycleState(), p.score(CycleState(), req, candidates(s, req)))
    assert norm.tolist() == [0.0, 100.0]


def test_energy_weighs_battery_nodes_more_as_they_drain(mk):
    nodes = [
        mk.cpu_node("mains", node_type="edge", cpu=8, mem_gib=16),
        mk.cpu_node(
            "full", node_type="edge", cpu=8, mem_gib=16, power_source="battery", battery_percent=90.0
        ),
        mk.cpu_node("low", node_type="edge", cpu=8, mem_gib=16, power_source="battery", battery_percent=20.0),
    ]
    s = mk.scheduler(nodes=nodes)
    for n in ("mains", "full", "low"):
        place(s, n, 1, 1, wid=n)
    req = mk.request("w", cpu=2)
    raw = plugin("Energy", s).score(CycleState(), req, candidates(s, req))
    assert raw[0] > raw[1] > raw[2]
    fixed = plugin("Energy", s, {"adaptive": False}).score(CycleState(), req, candidates(s, req))
    assert fixed[0] == fixed[1] == fixed[2]


def test_data_locality_prefers_the_data_node_then_its_rack(mk):
    nodes = [mk.cpu_node("d", zone="r1"), mk.cpu_node("near", zone="r1"), mk.cpu_node("far", zone="r2")]
    s = mk.scheduler(nodes=nodes)
    p = plugin("DataLocality", s)
    req = mk.request("w", data_location="d", data_bytes=10 * 10**9)
    raw = p.score(CycleState(), req, candidates(s, req))
    assert raw[0] > raw[1] > raw[2]
    s.observe_link("near", "far", 0.3, 1e6, at=0.0)  # a measured, congested rack pair
    later = CycleState()
    later.write(STATE_NOW, 1.0)  # the graph refreshes at most every refresh_s (5 s)
    assert p.score(later, req, candidates(s, req))[2] == raw[2]
    later.write(STATE_NOW, 6.0)
    assert p.score(later, req, candidates(s, req))[2] < raw[2]


def test_multi_objective_scores_the_reward_on_a_fixed_scale(mk):
    s = mk.scheduler("edgeplane", nodes=[mk.cpu_node("idle"), mk.cpu_node("busy")])
    place(s, "busy", 16, 16)
    p = plugin("MultiObjective", s)
    req = mk.request("w", cpu=4, kind="batch", expected_runtime_s=600)
    state = CycleState()
    raw = p.score(state, req, candidates(s, req))
    assert raw[1] > raw[0]  # filling a busy node below the knee beats waking an idle one
    norm = p.normalize(state, raw)
    assert np.all((0 <= norm) & (norm <= 100))
    assert (norm[1] - norm[0]) == pytest.approx(100 * (raw[1] - raw[0]) / (p.ceiling - p.floor))
