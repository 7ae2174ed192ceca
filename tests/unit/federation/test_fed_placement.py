"""Cluster-level placement (level one) and failover through the scheduler (level two)."""

from __future__ import annotations

from collections import Counter

import pytest

from edgeplane_contract.resources import ResourceRequest

from controlplane.federation.config import parse_federation
from controlplane.federation.placement import ClusterAggregate, plan_clusters
from controlplane.scheduling.model import Affinity, NodeState, WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler

GiB = 2**30


def federation(**placement):
    return parse_federation(
        {
            "version": 1,
            "clusters": [
                {
                    "name": "eu",
                    "region": "eu-west",
                    "cost_per_core_hour": 0.04,
                    "carbon_g_per_kwh": 200,
                    "weight": 1,
                },
                {
                    "name": "us",
                    "region": "us-east",
                    "cost_per_core_hour": 0.03,
                    "carbon_g_per_kwh": 400,
                    "weight": 3,
                },
                {
                    "name": "ap",
                    "region": "ap-south",
                    "cost_per_core_hour": 0.02,
                    "carbon_g_per_kwh": 600,
                    "weight": 1,
                },
            ],
            "latency_ms": {"eu-west": {"us-east": 80, "ap-south": 140}, "us-east": {"ap-south": 210}},
            "placement": placement,
        }
    )


def aggregates(**cpu_free):
    regions = {"eu": "eu-west", "us": "us-east", "ap": "ap-south"}
    return {
        name: ClusterAggregate(name, regions[name], ready_nodes=1, cpu_free=cpu, memory_free=1e15)
        for name, cpu in cpu_free.items()
    }


def plan(fed, aggs, replicas, **kw):
    return plan_clusters(
        resources=ResourceRequest(cpu=1, memory=GiB), replicas=replicas, federation=fed, aggregates=aggs, **kw
    )


def test_divide_by_capacity_is_proportional_to_room():
    p = plan(federation(divide="capacity"), aggregates(eu=10, us=30, ap=0), 8)
    assert Counter(p.assignments) == {"us": 6, "eu": 2}


def test_divide_by_weights_follows_cluster_weights():
    p = plan(federation(divide="weights"), aggregates(eu=100, us=100, ap=100), 10)
    assert Counter(p.assignments) == {"us": 6, "eu": 2, "ap": 2}


def test_room_caps_a_cluster_and_the_rest_goes_elsewhere():
    p = plan(federation(divide="weights"), aggregates(eu=100, us=2, ap=100), 10)
    assert Counter(p.assignments)["us"] == 2 and len(p.assignments) == 10


def test_spread_over_at_least_n_regions():
    p = plan(federation(divide="capacity", spread_min_regions=3), aggregates(eu=1000, us=10, ap=10), 3)
    assert set(p.assignments) == {"eu", "us", "ap"}


def test_spread_fails_with_a_reason_when_regions_are_missing():
    p = plan(federation(spread_min_regions=3), aggregates(eu=10, us=10), 3)
    assert not p.ok and "spread_min_regions=3" in p.reason


def test_latency_to_the_data_ranks_clusters():
    fed = federation(latency_weight=1, cost_weight=0, carbon_weight=0)
    p = plan(fed, aggregates(eu=100, us=100, ap=100), 1, origin_region="ap-south")
    assert p.ranking[0] == "ap" and p.assignments == ["ap"]


def test_a_single_replica_goes_to_the_best_cluster_not_the_roomiest():
    fed = federation(divide="capacity", latency_weight=1, cost_weight=0, carbon_weight=0)
    p = plan(fed, aggregates(eu=500, us=100, ap=60), 1, origin_region="ap-south")
    assert p.assignments == ["ap"]


def test_carbon_weight_prefers_clean_grids():
    fed = federation(latency_weight=0, cost_weight=0, carbon_weight=1)
    assert plan(fed, aggregates(eu=100, us=100, ap=100), 1).ranking == ["eu", "us", "ap"]


def test_affinity_and_unavailability_exclude_clusters():
    aggs = aggregates(eu=100, us=100, ap=100)
    assert set(plan(federation(), aggs, 4, clusters=["eu", "ap"]).assignments) <= {"eu", "ap"}
    assert "us" not in plan(federation(), aggs, 4, unavailable={"us"}).assignments
    assert not plan(federation(), aggs, 1, regions=["mars"]).ok


def fleet(fed):
    s = Scheduler("default", fed, clock=lambda: 0.0)
    for cluster, region in (("eu", "eu-west"), ("us", "us-east"), ("ap", "ap-south")):
        for i in range(2):
            s.upsert_node(NodeState(f"{cluster}-{i}", cluster=cluster, region=region, cpu=8, memory=32 * GiB))
    return s


def test_two_level_placement_spreads_replicas_over_clusters():
    s = fleet(federation(divide="capacity", spread_min_regions=2))
    d = s.schedule(WorkloadRequest("w", resources=ResourceRequest(cpu=2, memory=GiB), replicas=4))
    assert d.scheduled
    assert len({p.cluster for p in d.placements}) >= 2
    assert d.explanation.scope.cluster_plan.assignments == [p.cluster for p in d.placements]


def test_cluster_affinity_holds_at_both_levels():
    s = fleet(federation())
    d = s.schedule(
        WorkloadRequest(
            "w", resources=ResourceRequest(cpu=2, memory=GiB), replicas=3, affinity=Affinity(clusters=["ap"])
        )
    )
    assert {p.cluster for p in d.placements} == {"ap"}


def test_failover_replaces_replicas_of_an_unavailable_cluster():
    s = fleet(federation(divide="weights"))
    d = s.schedule(WorkloadRequest("w", resources=ResourceRequest(cpu=2, memory=GiB), replicas=5))
    down = Counter(p.cluster for p in d.placements).most_common(1)[0][0]
    moved = [p.replica for p in d.placements if p.cluster == down]
    (redo,) = s.failover({down})
    assert sorted(p.replica for p in redo.placements) == moved
    assert all(p.placed and p.cluster != down for p in redo.placements)
    assert redo.explanation.failover_from == (down,)
    assert all(a.node.split("-")[0] != down for a in s.ledger)
    # New work avoids the unavailable cluster until it is back.
    d2 = s.schedule(WorkloadRequest("x", resources=ResourceRequest(cpu=1, memory=GiB), replicas=6))
    assert down not in {p.cluster for p in d2.placements}
    s.set_cluster_available(down, True)
    d3 = s.schedule(
        WorkloadRequest("y", resources=ResourceRequest(cpu=1, memory=GiB), affinity=Affinity(clusters=[down]))
    )
    assert d3.scheduled


def test_failover_queues_what_the_other_clusters_cannot_hold():
    s = fleet(federation())
    s.schedule(
        WorkloadRequest(
            "fill",
            resources=ResourceRequest(cpu=8, memory=GiB),
            replicas=4,
            affinity=Affinity(clusters=["eu", "us"]),
        )
    )
    s.schedule(
        WorkloadRequest("w", resources=ResourceRequest(cpu=8, memory=GiB), affinity=Affinity(clusters=["ap"]))
    )
    (redo,) = s.failover({"ap"})
    assert redo.queued and not redo.scheduled
    assert [e["workload_id"] for e in s.pending()] == ["w"]
    s.set_cluster_available("ap", True)  # the cluster recovers: the replica goes back
    (back,) = s.schedule_pending()
    assert back.placements[0].cluster == "ap"


@pytest.mark.parametrize("bad", [{"eu": 0, "us": 0, "ap": 0}])
def test_no_room_anywhere_still_names_the_best_clusters(bad):
    p = plan(federation(), aggregates(**bad), 2)
    assert len(p.assignments) == 2


def test_a_replica_goes_to_a_cluster_with_room_before_anything_is_preempted():
    """The plan's first cluster is full of low-priority work, another has room: the replica is
    placed there and nothing is evicted (preemption is the last resort, across the federation)."""
    from controlplane.scheduling.model import Assignment

    s = fleet(federation())
    first = plan_clusters(
        resources=ResourceRequest(cpu=8, memory=GiB),
        replicas=1,
        federation=s.federation,
        aggregates={
            n: ClusterAggregate(n, r, ready_nodes=2, cpu_free=16, memory_free=1e15)
            for n, r in (("eu", "eu-west"), ("us", "us-east"), ("ap", "ap-south"))
        },
    ).assignments[0]
    for i in range(2):  # the plan's favourite cluster: both nodes taken by priority-0 work
        assert s.reserve_existing(f"low-{i}", 0, f"{first}-{i}", Assignment(cpu=8, memory=GiB), priority=0).ok
    d = s.schedule(WorkloadRequest("urgent", resources=ResourceRequest(cpu=8, memory=GiB), priority=10))
    assert d.scheduled and not d.victims
    assert d.placements[0].cluster != first
    # With no room anywhere, it preempts after all.
    for cluster in ("eu", "us", "ap"):
        for i in range(2):
            if cluster != first:
                s.reserve_existing(
                    f"low-{cluster}-{i}", 0, f"{cluster}-{i}", Assignment(cpu=8, memory=GiB), priority=0
                )
    d = s.schedule(WorkloadRequest("urgent-2", resources=ResourceRequest(cpu=8, memory=GiB), priority=10))
    assert d.scheduled and len(d.victims) == 1


def test_a_cluster_whose_mig_gpus_are_each_too_full_has_no_room_for_an_instance():
    fragmented = ClusterAggregate("eu", "eu-west", ready_nodes=4, cpu_free=64, memory_free=1e15,
                                  mig_compute_free=8, mig_largest_free=2)  # fmt: skip
    assert fragmented.room_for(ResourceRequest(cpu=1, memory=GiB, mig=["3g.20gb"])) == 0
    assert fragmented.room_for(ResourceRequest(cpu=1, memory=GiB, mig=["1g.5gb"])) == 8
    unknown = ClusterAggregate(
        "eu", "eu-west", ready_nodes=4, cpu_free=64, memory_free=1e15, mig_compute_free=8
    )
    assert unknown.room_for(ResourceRequest(cpu=1, memory=GiB, mig=["3g.20gb"])) == 2  # no bound without it


def test_the_plan_skips_a_cluster_whose_mig_gpus_have_no_legal_slot_left():
    """eu's MIG GPU has 3 compute slices free but no legal start for a 3g instance (1g
    instances at memory slices 1, 3, 5 and 6 leave no four free in a row at 0 or 4): the plan,
    not a failed cycle, sends the request to us, which the summed slices alone would not."""
    from controlplane.scheduling.model import Assignment, GpuDevice, MigSlice

    s = Scheduler("default", federation(), clock=lambda: 0.0)
    for cluster, region in (("eu", "eu-west"), ("us", "us-east")):
        s.upsert_node(NodeState(f"{cluster}-0", cluster=cluster, region=region, cpu=8, memory=32 * GiB,
                                gpus=[GpuDevice(0, mig_enabled=True)], node_type="gpu"))  # fmt: skip
    for start in (1, 3, 5, 6):
        one_g = Assignment(cpu=0.1, memory=GiB, mig=(MigSlice(0, "1g.5gb", start),))
        assert s.reserve_existing(f"eu-1g-{start}", 0, "eu-0", one_g).ok
    aggregates = s.aggregates()
    assert aggregates["eu"].mig_compute_free == 3  # room by the sum: one 3g
    request = ResourceRequest(cpu=1, memory=GiB, mig=["3g.20gb"])
    d = s.schedule(WorkloadRequest("big", resources=request))
    assert d.scheduled and d.placements[0].cluster == "us"
    # Without the slot count eu, cheaper or not, would be tried first and fail its cycle.
    plan = d.explanation.scope.cluster_plan
    assert "eu" not in plan.ranking and plan.ranking[0] == "us"


def test_the_plan_skips_a_cluster_whose_free_mig_slots_sit_on_nodes_without_the_cpu():
    """eu has a free MIG GPU and free CPUs, but on different nodes: its GPU node's CPUs are
    taken. By the summed figures (and the GPU-slot count alone) eu has room for the 2-CPU MIG
    replica; the node-by-node count gives it none, so the plan sends it to us at once instead of
    through a failed cycle in eu (the 100-cluster bench's slowest decisions, issue 24)."""
    from controlplane.scheduling.model import Assignment, GpuDevice

    fed = federation(cost_weight=0, latency_weight=0, carbon_weight=1)  # eu (200 g/kWh) before us (400)
    s = Scheduler("default", fed, clock=lambda: 0.0)
    for cluster, region in (("eu", "eu-west"), ("us", "us-east")):
        s.upsert_node(NodeState(f"{cluster}-gpu", cluster=cluster, region=region, cpu=4, memory=32 * GiB,
                                gpus=[GpuDevice(0, mig_enabled=True)], node_type="gpu"))  # fmt: skip
    s.upsert_node(NodeState("eu-cpu", cluster="eu", region="eu-west", cpu=16, memory=64 * GiB))
    assert s.reserve_existing("eu-busy", 0, "eu-gpu", Assignment(cpu=3.5, memory=GiB)).ok
    aggregates = s.aggregates()
    assert aggregates["eu"].cpu_free >= 16 and aggregates["eu"].mig_compute_free == 7
    request = ResourceRequest(cpu=2, memory=GiB, mig=["1g.5gb"])
    cycles = s.stats["cycles"]
    d = s.schedule(WorkloadRequest("mig", resources=request))
    assert d.scheduled and d.placements[0].cluster == "us"
    assert s.stats["cycles"] - cycles == 1  # no failed cycle in eu first
    plan = d.explanation.scope.cluster_plan
    assert "eu" not in plan.ranking and plan.ranking[0] == "us"
    # Once the GPU node's CPUs are free again, eu has the room.
    s.release("eu-busy")
    d = s.schedule(WorkloadRequest("mig-2", resources=request))
    assert "eu" in d.explanation.scope.cluster_plan.ranking


def _fragmented(profile="default"):
    """ap (the cheapest) has 4 CPUs free in all but at most 1 on any node; eu has a node with 8."""
    s = Scheduler(profile, federation(cost_weight=1, latency_weight=0, carbon_weight=0), clock=lambda: 0.0)
    for i in range(4):
        s.upsert_node(NodeState(f"ap-{i}", cluster="ap", region="ap-south", cpu=1, memory=32 * GiB))
    s.upsert_node(NodeState("eu-0", cluster="eu", region="eu-west", cpu=8, memory=32 * GiB))
    return s


def test_a_cluster_where_no_single_node_fits_a_replica_is_not_planned():
    """The summed free CPU (4) says ap has room for two 2-CPU replicas; no node of it can hold
    one: the plan leaves it out instead of sending the replica there to fail and move on."""
    s = _fragmented()
    assert s.aggregates()["ap"].cpu_free == 4.0
    d = s.schedule(WorkloadRequest("w", resources=ResourceRequest(cpu=2, memory=GiB)))
    assert d.scheduled and [p.cluster for p in d.placements] == ["eu"]
    plan = d.explanation.scope.cluster_plan
    assert plan.assignments == ["eu"] and "ap" not in plan.ranking
    assert plan.scores["eu"]["room"] == 4.0  # node by node: one 8-CPU node, four replicas
    # A replica that fits one node of ap still goes there first (the cheapest).
    d = s.schedule(WorkloadRequest("small", resources=ResourceRequest(cpu=1, memory=GiB)))
    assert [p.cluster for p in d.placements] == ["ap"]


def test_a_profile_whose_quotas_go_below_the_request_keeps_such_a_cluster():
    """With a CPU quota bin of 0.5, a 2-CPU replica may run on 1 CPU: ap stays in the plan."""
    profile = {
        "name": "halves",
        "plugins": [
            {"name": "NodeReady"},
            {"name": "NodeResourcesFit"},
            {"name": "NodeResourcesLeastAllocated"},
        ],
        "action_space": {"cpu_bins": [0.5, 1.0], "memory_bins": [1.0]},
    }
    s = _fragmented(profile)
    d = s.schedule(WorkloadRequest("w", resources=ResourceRequest(cpu=2, memory=GiB)))
    assert d.explanation.scope.cluster_plan.assignments == ["ap"]
    assert d.scheduled and [p.cluster for p in d.placements] == ["ap"]


def test_free_cpu_on_one_node_and_free_memory_on_another_hold_no_replica():
    s = Scheduler("default", federation(cost_weight=1, latency_weight=0, carbon_weight=0), clock=lambda: 0.0)
    s.upsert_node(NodeState("ap-cpu", cluster="ap", region="ap-south", cpu=8, memory=1 * GiB))
    s.upsert_node(NodeState("ap-mem", cluster="ap", region="ap-south", cpu=1, memory=32 * GiB))
    s.upsert_node(NodeState("eu-0", cluster="eu", region="eu-west", cpu=8, memory=32 * GiB))
    d = s.schedule(WorkloadRequest("w", resources=ResourceRequest(cpu=2, memory=4 * GiB)))
    plan = d.explanation.scope.cluster_plan
    assert plan.assignments == ["eu"] and "ap" not in plan.ranking
    assert d.scheduled and [p.cluster for p in d.placements] == ["eu"]
