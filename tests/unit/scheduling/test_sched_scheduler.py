"""The facade: decisions, explanations, gangs, the queue, preemption, merges, restarts."""

from __future__ import annotations

import json

import pytest

from controlplane.scheduling.framework import Code
from controlplane.scheduling.model import Assignment, MigSlice


def test_a_decision_names_node_assignment_and_explains_itself(mk):
    s = mk.scheduler("edgeplane", nodes=[mk.cpu_node(f"n{i}") for i in range(5)] + [mk.gpu_node("g", mig=2)])
    d = s.schedule(mk.request("w", cpu=2, mig=["2g.10gb"], kind="service", sla_latency_s=60))
    assert d.scheduled and d.status.code == Code.SUCCESS
    (p,) = d.placements
    assert p.node == "g" and p.assignment.mig[0].profile == "2g.10gb"
    rep = d.explanation.to_dict()["replicas"][0]
    assert rep["actions"]["total"] == 5 + 6  # five CPU nodes (masked) + 2 GPUs x 3 starts
    assert rep["actions"]["remaining"] == 6
    assert rep["actions"]["masked"] == 5
    assert rep["actions"]["masked_by"] == {"NodeResourcesFit: node has no MIG-enabled GPU": 5}
    assert set(rep["chosen"]["plugins"]) >= {"MultiObjective", "GpuFragmentation"}
    for item in rep["chosen"]["plugins"].values():
        assert set(item) == {"raw", "normalized", "weight"}
    assert "R_util" in rep["chosen"]["reward"]
    json.dumps(d.to_dict())  # JSON-able


def test_alternatives_are_the_next_best_nodes(mk):
    s = mk.scheduler("default", nodes=[mk.cpu_node(f"n{i}") for i in range(6)])
    d = s.schedule(mk.request("w"))
    rep = d.explanation.replicas[0]
    assert len(rep.alternatives) == 3
    scores = [rep.chosen.score] + [a.score for a in rep.alternatives]
    assert scores == sorted(scores, reverse=True)


def test_unschedulable_says_why_per_node_like_kube(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=2), mk.cpu_node("b", ready=False)])
    d = s.schedule(mk.request("w", cpu=4), enqueue=False)
    assert not d.scheduled and not d.queued
    assert d.status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "0/2 nodes are available" in d.status.reasons[0]
    assert "not ready" in d.status.reasons[0] and "too little cpu" in d.status.reasons[0]


def test_gang_is_all_or_nothing(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8), mk.cpu_node("b", cpu=8)])
    d = s.schedule(mk.request("g", cpu=8, replicas=3, gang=True), enqueue=False)
    assert not any(p.placed for p in d.placements)
    assert len(s.ledger) == 0 and s.nodes.cpu_alloc.sum() == 0
    assert all(p.reason.startswith("gang:") for p in d.placements)
    ok = s.schedule(mk.request("h", cpu=8, replicas=2, gang=True))
    assert ok.scheduled and {p.node for p in ok.placements} == {"a", "b"}


def test_non_gang_places_what_fits_and_queues_the_rest(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8)])
    d = s.schedule(mk.request("w", cpu=8, replicas=2))
    assert [p.placed for p in d.placements] == [True, False]
    assert d.queued and s.pending()[0]["replicas"] == [1]


def test_waiting_work_is_placed_when_capacity_frees(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8)])
    assert s.schedule(mk.request("big", cpu=8)).scheduled
    waiting = s.schedule(mk.request("next", cpu=6))
    assert waiting.queued and not waiting.scheduled
    assert s.schedule_pending() == []  # nothing freed yet: not even retried
    s.release("big")
    (d,) = s.schedule_pending()
    assert d.workload_id == "next" and d.scheduled and not d.queued
    assert s.pending() == []


def test_higher_priority_waits_first(mk):
    s = mk.scheduler("binpack", nodes=[mk.cpu_node("a", cpu=8)])
    s.schedule(mk.request("big", cpu=8))
    s.schedule(mk.request("low", cpu=8, priority=1))
    s.schedule(mk.request("high", cpu=8, priority=5))
    assert [e["workload_id"] for e in s.pending()] == ["high", "low"]
    s.release("big")
    assert [d.workload_id for d in s.schedule_pending()] == ["high"]


def test_cancel_drops_a_waiting_workload(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=1)])
    s.schedule(mk.request("w", cpu=4))
    assert s.cancel("w") and not s.cancel("w") and s.pending() == []


def test_preemption_evicts_the_fewest_lowest_priority_victims(mk):
    s = mk.scheduler("default", nodes=[mk.cpu_node("a", cpu=8), mk.cpu_node("b", cpu=8)])
    # a: two priority-1 replicas (4+4); b: one priority-5 (4) and one priority-0 (4).
    for wid, node, prio in (("a1", "a", 1), ("a2", "a", 1), ("b5", "b", 5), ("b0", "b", 0)):
        assert s.reserve_existing(wid, 0, node, Assignment(cpu=4, memory=2**30), priority=prio).ok
    d = s.schedule(mk.request("urgent", cpu=4, priority=10))
    assert d.scheduled
    # One victim suffices on either node; b's victim has the lowest priority (0 < 1).
    assert [(v.workload_id, v.node) for v in d.victims] == [("b0", "b")]
    assert d.placements[0].node == "b"
    assert s.ledger.get("b0", 0) is None and s.ledger.get("b5", 0) is not None


def test_preemption_keeps_what_it_can_reprieve(mk):
    s = mk.scheduler("default", nodes=[mk.cpu_node("a", cpu=8)])
    for wid, prio in (("p1", 1), ("p2", 2), ("p3", 3)):
        s.reserve_existing(wid, 0, "a", Assignment(cpu=2, memory=2**30), priority=prio)
    d = s.schedule(mk.request("urgent", cpu=4, priority=10))
    # 2 cores are free; it needs 4: evicting only the lowest-priority replica is enough.
    assert [v.workload_id for v in d.victims] == ["p1"]


def test_preemption_never_when_the_workload_says_so(mk):
    s = mk.scheduler("default", nodes=[mk.cpu_node("a", cpu=4)])
    s.reserve_existing("low", 0, "a", Assignment(cpu=4, memory=2**30), priority=0)
    d = s.schedule(mk.request("w", cpu=4, priority=9, preemption_policy="Never"), enqueue=False)
    assert not d.scheduled and not d.victims


def test_binpack_profile_does_not_preempt(mk):
    s = mk.scheduler("binpack", nodes=[mk.cpu_node("a", cpu=4)])
    s.reserve_existing("low", 0, "a", Assignment(cpu=4, memory=2**30), priority=0)
    assert not s.schedule(mk.request("w", cpu=4, priority=9), enqueue=False).scheduled


def test_failed_gang_rolls_back_its_evictions(mk):
    s = mk.scheduler("default", nodes=[mk.cpu_node("a", cpu=4), mk.cpu_node("b", cpu=4)])
    s.reserve_existing("low", 0, "a", Assignment(cpu=4, memory=2**30), priority=0)
    s.reserve_existing("same", 0, "b", Assignment(cpu=4, memory=2**30), priority=9)
    d = s.schedule(mk.request("g", cpu=4, replicas=2, gang=True, priority=9), enqueue=False)
    assert not d.scheduled and d.victims == []
    assert s.ledger.get("low", 0) is not None  # the eviction was undone


def _fragmented_gpu_node(mk, profile):
    s = mk.scheduler(profile, nodes=[mk.gpu_node("g", mig=2)])
    # GPU 0: a batch 1g at slice 0. GPU 1: a 3g at slice 0. No GPU is empty.
    s.reserve_existing(
        "b", 0, "g", Assignment(cpu=1, memory=2**30, mig=(MigSlice(0, "1g.5gb", 0),)), kind="batch"
    )
    s.reserve_existing(
        "s", 0, "g", Assignment(cpu=1, memory=2**30, mig=(MigSlice(1, "3g.20gb", 0),)), kind="batch"
    )
    return s


def test_fragment_merge_moves_a_batch_slice_to_free_a_whole_gpu(mk):
    s = _fragmented_gpu_node(mk, "edgeplane-merge")
    d = s.schedule(mk.request("big", cpu=1, mig=["7g.40gb"], kind="batch"))
    assert d.scheduled
    (move,) = d.migrations
    assert move.workload_id == "b" and move.new.mig[0].gpu == 1
    assert d.placements[0].assignment.mig == (MigSlice(0, "7g.40gb", 0),)
    assert d.explanation.replicas[0].post_filter.plugin == "GpuFragmentation"


def test_edgeplane_waits_for_a_whole_gpu_rather_than_restart_a_batch_slice(mk):
    # Issue 13: a move restarts the moved replica from scratch; on the mig-fragmentation preset
    # merging lowered large-GPU schedulability, so the edgeplane profile leaves the slices be.
    s = _fragmented_gpu_node(mk, "edgeplane")
    d = s.schedule(mk.request("big", cpu=1, mig=["7g.40gb"], kind="batch"), enqueue=False)
    assert not d.scheduled and d.migrations == []
    assert s.ledger.get("b", 0).assignment.mig[0] == MigSlice(0, "1g.5gb", 0)


def test_fragment_merge_leaves_latency_sensitive_slices_alone(mk):
    s = mk.scheduler("edgeplane-merge", nodes=[mk.gpu_node("g", mig=2)])
    s.reserve_existing("svc", 0, "g", Assignment(cpu=1, memory=2**30, mig=(MigSlice(0, "1g.5gb", 0),)))
    s.reserve_existing(
        "fn", 0, "g", Assignment(cpu=1, memory=2**30, mig=(MigSlice(1, "3g.20gb", 0),)), kind="function"
    )
    d = s.schedule(mk.request("big", cpu=1, mig=["7g.40gb"], kind="batch"), enqueue=False)
    assert not d.scheduled and d.migrations == []
    assert s.ledger.get("svc", 0).assignment.mig[0] == MigSlice(0, "1g.5gb", 0)


def test_reserve_existing_rebuilds_accounting_and_refuses_over_commit(mk):
    s = mk.scheduler(nodes=[mk.gpu_node("g", mig=1)])
    ok = s.reserve_existing("w", 0, "g", Assignment(cpu=60, memory=2**30, gpus=(1,)))
    assert ok.ok
    assert s.node("g").cpu_allocated == 60 and s.node("g").gpus_allocated == [1]
    assert s.reserve_existing("x", 0, "g", Assignment(cpu=8, memory=2**30)).code == Code.UNSCHEDULABLE
    assert (
        "GPU 1 is not free"
        in s.reserve_existing("y", 0, "g", Assignment(cpu=1, memory=1, gpus=(1,))).message()
    )
    assert (
        "MIG mode"
        in s.reserve_existing(
            "z", 0, "g", Assignment(cpu=1, memory=1, mig=(MigSlice(1, "1g.5gb", 0),))
        ).message()
    )
    assert not s.reserve_existing("q", 0, "nope", Assignment(cpu=1, memory=1)).ok


def test_remove_node_reports_lost_replicas_and_frees_nothing_else(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a"), mk.cpu_node("b")])
    s.reserve_existing("w", 0, "a", Assignment(cpu=1, memory=1))
    s.reserve_existing("w", 1, "b", Assignment(cpu=1, memory=1))
    assert s.remove_node("a") == [("w", 0)]
    assert list(s.ledger.of_workload("w")) == [1]
    assert s.nodes.names == ["b"] and s.nodes.cpu_alloc.tolist() == [1.0]


def test_not_ready_nodes_get_nothing_until_ready_again(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a")])
    s.set_node_ready("a", False)
    assert s.schedule(mk.request("w")).queued
    s.set_node_ready("a", True)
    assert [d.workload_id for d in s.schedule_pending()] == ["w"]


def test_replicas_argument_places_only_those(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a")])
    d = s.schedule(mk.request("w", replicas=3), replicas=[2])
    assert [p.replica for p in d.placements] == [2]
    assert list(s.ledger.of_workload("w")) == [2]


def test_upsert_keeps_allocations_of_a_known_node(mk):
    s = mk.scheduler(nodes=[mk.cpu_node("a", cpu=8)])
    s.schedule(mk.request("w", cpu=4))
    s.upsert_node(mk.cpu_node("a", cpu=16, labels={"x": "y"}))
    assert s.node("a").cpu_allocated == 4 and s.node("a").cpu == 16


def test_snapshot_is_json(mk):
    s = mk.scheduler(nodes=[mk.gpu_node("g", mig=2)])
    s.schedule(mk.request("w", mig=["1g.5gb"]))
    snap = json.loads(json.dumps(s.snapshot()))
    assert snap["allocations"][0]["assignment"]["mig"][0]["profile"] == "1g.5gb"
    assert snap["profile"]["name"] == "default"


def test_same_seed_same_tie_breaks(mk):
    def run(seed):
        s = mk.scheduler(nodes=[mk.cpu_node(f"n{i}") for i in range(8)], seed=seed)
        return [s.schedule(mk.request(f"w{i}", cpu=1)).placements[0].node for i in range(6)]

    assert run(3) == run(3)


@pytest.mark.parametrize("profile", ["default", "binpack", "edgeplane"])
def test_kube_sampling_scores_a_share_of_large_fleets(mk, profile):
    s = mk.scheduler(profile, nodes=[mk.cpu_node(f"n{i:03d}") for i in range(500)])
    d = s.schedule(mk.request("w"))
    scored = d.explanation.replicas[0].nodes.scored
    # default: percentageOfNodesToScore adaptive = 50 - 500/125 = 46% -> 230 nodes
    assert scored == (230 if profile == "default" else 500)


def test_edgeplane_scores_every_node_up_to_its_floor_and_a_rotating_window_beyond(mk):
    """``min_nodes_to_score`` (edgeplane: 1,000) bounds kube's adaptive share from below: a
    1,200-node fleet (adaptive 41% = 492) scores 1,000 nodes, and the next cycle's window starts
    where the last one stopped."""
    s = mk.scheduler("edgeplane", nodes=[mk.cpu_node(f"n{i:04d}") for i in range(1200)])
    assert s.profile.min_nodes_to_score == 1000
    first = s.schedule(mk.request("w0")).explanation.replicas[0].nodes
    assert (first.total, first.feasible, first.scored) == (1200, 1200, 1000)
    assert s._cycles.next_start == 1000
    second = s.schedule(mk.request("w1")).explanation.replicas[0].nodes
    assert second.scored == 1000 and s._cycles.next_start == 800
    small = mk.scheduler("edgeplane", nodes=[mk.cpu_node(f"n{i:03d}") for i in range(999)])
    assert small.schedule(mk.request("w")).explanation.replicas[0].nodes.scored == 999


def test_min_nodes_to_score_is_validated():
    from controlplane.errors import ConfigError
    from controlplane.scheduling.profiles import BUILTIN_PROFILES, parse_profile

    for bad in (0, -5, 1.5, True, "100"):
        with pytest.raises(ConfigError, match="min_nodes_to_score"):
            parse_profile({**BUILTIN_PROFILES["default"], "min_nodes_to_score": bad})
    assert parse_profile(BUILTIN_PROFILES["default"]).min_nodes_to_score == 100


def test_feasible_nodes_runs_a_profiles_filters_and_leaves_the_cycles_untouched(mk):
    from controlplane.scheduling.profiles import FUNCTION_PROFILE

    nodes = [mk.cpu_node(f"n{i}", cpu=4, cluster="a" if i < 3 else "b") for i in range(6)]
    quiet, asked = mk.scheduler("edgeplane", nodes=nodes), mk.scheduler("edgeplane", nodes=nodes)
    asked.set_node_ready("n1", False)
    quiet.set_node_ready("n1", False)
    for k in range(4):  # the same decisions with and without feasibility questions between them
        fit = asked.feasible_nodes(mk.request("f", cpu=1, kind="function"), FUNCTION_PROFILE)
        assert "n1" not in fit.nodes and fit.reason == ""
        a, q = asked.schedule(mk.request(f"w{k}", cpu=2)), quiet.schedule(mk.request(f"w{k}", cpu=2))
        assert [p.node for p in a.placements] == [p.node for p in q.placements]
    assert asked.stats == quiet.stats

    # Free capacity after the workloads' reservations, affinity, and a reason when none fits.
    taken = {p.node for k in range(4) for p in asked.schedule(mk.request(f"w{k}", cpu=2)).placements}
    big = asked.feasible_nodes(mk.request("f", cpu=3, kind="function"), FUNCTION_PROFILE)
    assert set(big.nodes) == {"n0", "n2", "n3", "n4", "n5"} - taken
    only_b = mk.request("f", cpu=1, kind="function")
    only_b.affinity.clusters = ["b"]
    assert set(asked.feasible_nodes(only_b, FUNCTION_PROFILE).nodes) <= {"n3", "n4", "n5"}
    none = asked.feasible_nodes(mk.request("f", cpu=64, kind="function"), FUNCTION_PROFILE)
    assert none.nodes == () and none.reason.startswith("0/6 nodes are available: ")
    assert "5 nodes have too little cpu" in none.reason and "1 node(s) were not ready" in none.reason


def test_preemption_walking_the_eligible_nodes_chooses_as_walking_the_whole_ledger(mk):
    """select_victims takes the eligible nodes' own allocations when they are fewer than the
    placed replicas, and walks the whole ledger otherwise: the same choice either way."""
    import numpy as np

    from controlplane.scheduling.preemption import select_victims

    class Sized:
        """The ledger, claiming a size that forces one walk or the other."""

        def __init__(self, ledger, size):
            self.ledger, self.size = ledger, size

        def __len__(self):
            return self.size

        def __iter__(self):
            return iter(self.ledger)

        def on_node(self, node):
            return self.ledger.on_node(node)

    s = mk.scheduler("default", nodes=[mk.cpu_node(f"n{i}", cpu=8) for i in range(6)])
    for i in range(6):
        for k, prio in enumerate((0, 1, 2)):
            s.reserve_existing(
                f"w{i}-{k}", 0, f"n{i}", Assignment(cpu=2, memory=2**30), priority=prio + i % 2
            )
    rng = np.random.default_rng(3)
    chosen = 0
    for _ in range(20):
        eligible = rng.random(6) < 0.5
        for cpu, priority in ((4, 5), (6, 2), (8, 9)):
            res = mk.request("x", cpu=cpu).resources
            per_node = select_victims(s.nodes, Sized(s.ledger, 10**6), res, priority, eligible)
            whole = select_victims(s.nodes, Sized(s.ledger, 0), res, priority, eligible)
            assert _victims_key(per_node) == _victims_key(whole)
            chosen += per_node is not None
    assert chosen > 10  # most cases have an answer to compare


def _victims_key(found):
    return None if found is None else (found[0], [(v.workload_id, v.replica) for v in found[1]])
