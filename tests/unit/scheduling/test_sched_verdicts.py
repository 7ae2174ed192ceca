"""Scheduler.filter_nodes and score_nodes: per-node Filter outcomes and Score totals, with no
effect on the scheduler (nothing reserved or counted, no sampling or random draw)."""

from __future__ import annotations

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import Assignment, NodeState, WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler

GiB = 2**30


def _fleet() -> Scheduler:
    sched = Scheduler("edgeplane", seed=7)
    for name in ("mains", "busy"):
        sched.upsert_node(NodeState(name=name, cpu=4, memory=8 * GiB, node_type="edge"))
    sched.upsert_node(
        NodeState(
            name="battery",
            cpu=4,
            memory=8 * GiB,
            node_type="edge",
            power_source="battery",
            battery_percent=30,
        )
    )
    sched.upsert_node(NodeState(name="small", cpu=1, memory=8 * GiB, node_type="edge"))
    sched.upsert_node(NodeState(name="down", cpu=4, memory=8 * GiB, node_type="edge", ready=False))
    assert sched.reserve_existing("w", 0, "busy", Assignment(cpu=3.0, memory=GiB)).ok
    return sched


def _request() -> WorkloadRequest:
    return WorkloadRequest(id="k8s:ns/p", resources=ResourceRequest(cpu=2, memory=GiB))


def test_each_node_gets_its_first_filters_reason_and_whether_preemption_could_help() -> None:
    verdicts = _fleet().filter_nodes(_request(), ["mains", "battery", "busy", "small", "down", "ghost"])
    assert verdicts["mains"].fits and verdicts["battery"].fits
    assert (verdicts["busy"].reason, verdicts["busy"].unresolvable) == ("Insufficient cpu", False)
    assert (verdicts["small"].reason, verdicts["small"].unresolvable) == ("node has too little cpu", True)
    assert (verdicts["down"].reason, verdicts["down"].unresolvable) == ("node(s) were not ready", True)
    assert (verdicts["ghost"].fits, verdicts["ghost"].unresolvable) == (False, True)
    # The same nodes as the filter the function router uses.
    assert set(_fleet().feasible_nodes(_request()).nodes) == {"mains", "battery"}


def test_score_totals_rank_a_battery_node_below_a_mains_node_and_skip_those_that_do_not_fit() -> None:
    totals = _fleet().score_nodes(_request(), ["mains", "battery", "busy", "ghost"])
    assert set(totals) == {"mains", "battery"}
    assert totals["mains"] > totals["battery"]


def test_asking_changes_nothing_in_the_scheduler() -> None:
    sched = _fleet()
    rng_before = sched._cycles.rng.getstate()
    stats_before = dict(sched.stats)
    start_before = sched._cycles.next_start
    allocated_before = sched.node("mains").cpu_allocated
    for _ in range(3):
        sched.filter_nodes(_request(), ["mains", "battery"])
        sched.score_nodes(_request(), ["mains", "battery"])
    assert sched._cycles.rng.getstate() == rng_before
    assert sched.stats == stats_before and sched._cycles.next_start == start_before
    assert sched.node("mains").cpu_allocated == allocated_before
