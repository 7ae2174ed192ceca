"""Topology graph (sliding window), power model, queue order, node table bookkeeping."""

from __future__ import annotations

import pytest

from edgeplane_contract.power import PowerModel

from controlplane.scheduling.model import Assignment, WorkloadRequest
from controlplane.scheduling.queue import SchedulingQueue
from controlplane.scheduling.topology import LinkDefaults, TopologyGraph


def graph(**kw):
    g = TopologyGraph(window_s=60.0, refresh_s=5.0, **kw)
    g.set_zones(["z0", "z1", "z2"], ["c", "c", "d"], ["r", "r", "s"])
    return g


def test_edges_use_the_median_of_the_window_and_forget_old_samples():
    g = graph()
    for t, bw in ((0, 1e8), (1, 2e8), (2, 9e9)):
        g.observe(0, 1, 1.0, bw, at=t)
    g.refresh(10.0, force=True)
    assert g.edge(0, 1) == (1.0, 2e8)
    g.refresh(100.0, force=True)  # all samples older than the 60 s window
    assert g.edge(0, 1) == (LinkDefaults().cluster_latency_ms, LinkDefaults().cluster_bandwidth)


def test_refresh_happens_at_most_every_refresh_interval():
    g = graph()
    assert g.refresh(0.0)
    g.observe(0, 1, 1.0, 1e6, at=0.0)
    assert not g.refresh(3.0)
    assert g.refresh(5.0)
    assert g.refreshes == 2


def test_unmeasured_pairs_fall_back_to_cluster_and_region_defaults():
    g = graph(region_latency_ms=lambda a, b: 0.0 if a == b else 80.0)
    g.refresh(0.0)
    d = LinkDefaults()
    assert g.edge(0, 0) == (d.zone_latency_ms, d.zone_bandwidth)
    assert g.edge(0, 2) == (d.cluster_latency_ms + 80.0, d.wan_bandwidth)
    times = g.transfer_s_from_zone(0, 1e9, now=0.0)
    assert times[0] < times[1] < times[2]


def test_power_is_idle_plus_linear_dynamic_and_small_asleep():
    pm = PowerModel()
    spec = pm.spec("cpu")
    assert pm.node_power("cpu", cpu_util=0.0) == spec.idle_w
    assert pm.node_power("cpu", cpu_util=0.5) == pytest.approx((spec.idle_w + spec.max_w) / 2)
    assert pm.node_power("cpu", cpu_util=1.0, asleep=True) == spec.sleep_w
    gpu = pm.spec("gpu")
    assert pm.node_power("gpu", cpu_util=0.0, gpus=2, gpu_units=1.0) == gpu.idle_w + 2 * gpu.gpu_idle_w + (
        gpu.gpu_max_w - gpu.gpu_idle_w
    )


def test_queue_orders_by_priority_then_arrival():
    q = SchedulingQueue()
    for wid, prio in (("a", 0), ("b", 5), ("c", 0), ("d", 5)):
        q.push(WorkloadRequest(wid, priority=prio), [0], epoch=0, reason="", now=0.0)
    assert [e.request.id for e in q.ordered()] == ["b", "d", "a", "c"]
    q.discard("b", [0])
    assert "b" not in q


def test_table_apply_and_release_round_trip(mk):
    s = mk.scheduler(nodes=[mk.gpu_node("g", mig=1, dpus=2)])
    t = s.nodes
    a = Assignment(cpu=3, memory=5, gpus=(1,), dpus=(1,))
    assert t.check(0, a) is None
    t.apply(0, a, +1)
    assert t.check(0, a) == "GPU 1 is not free"
    t.apply(0, a, -1)
    assert t.cpu_alloc[0] == 0 and not t.gpu_used.any() and t.dpu_used[0] == 0
