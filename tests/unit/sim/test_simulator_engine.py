"""The simulator's mechanisms on hand-built scenarios: contention, queueing, sleep, batteries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import WorkloadRequest
from controlplane.sim.engine import Simulation
from controlplane.sim.metrics import summarise
from controlplane.sim.presets import ContentionModel, NodeGroup, PowerManagerConfig, Preset
from controlplane.sim.workload import TaskSpec

GB = 10**9


def preset(groups, *, power=None, **kw):
    # No interference unless a test sets a contention model: full nodes run at full speed.
    kw.setdefault("contention", ContentionModel(amplitude=0.0, io_penalty=0.0))
    return Preset(
        name="t",
        description="test",
        groups=tuple(groups),
        classes=(),
        warmup_s=0.0,
        drain_s=kw.pop("drain_s", 6 * 3600.0),
        power_manager=power or PowerManagerConfig(enabled=False),
        congested_link_fraction=0.0,
        **kw,
    )


def task(tid, at, cpu, runtime, *, kind="batch", sla=None, patience=None, replicas=1):
    req = WorkloadRequest(
        id=tid,
        resources=ResourceRequest(cpu=cpu, memory=GB),
        replicas=replicas,
        kind=kind,
        sla_latency_s=sla,
        expected_runtime_s=runtime,
    )
    return TaskSpec(tid, "c", kind, at, req, runtime, sla, patience, False, None, True)


def run(p, tasks, profile="default", hours=1.0):
    sim = Simulation(p, tasks, scheduler_name=profile, profile=profile, hours=hours, seed=1)
    record = sim.run()
    return sim, record


def test_a_task_alone_runs_its_nominal_time():
    _, rec = run(preset([NodeGroup("n", 1, "cpu", 10, 64)]), [task("a", 0, 2, 100)])
    assert rec.tasks[0]["latency_s"] == pytest.approx(100.0)


def test_contention_above_the_knee_stretches_runtime_by_the_model():
    model = ContentionModel(knee=0.5, amplitude=1.0, sensitivity=(("batch", 1.0),))
    p = preset([NodeGroup("n", 1, "cpu", 10, 64)], contention=model)
    # 10 cores busy -> u = 1.0 -> c = 1 -> both run at half speed.
    _, rec = run(p, [task("a", 0, 5, 100), task("b", 0, 5, 100)])
    assert [t["latency_s"] for t in rec.tasks] == pytest.approx([200.0, 200.0])


def test_rates_change_when_a_neighbour_leaves():
    model = ContentionModel(knee=0.5, amplitude=1.0, sensitivity=(("batch", 1.0),))
    p = preset([NodeGroup("n", 1, "cpu", 10, 64)], contention=model)
    # Both at half speed until b finishes its 25 s of work at t=50; a has 75 s left, alone.
    _, rec = run(p, [task("a", 0, 5, 100), task("b", 0, 5, 25)])
    assert sorted(t["latency_s"] for t in rec.tasks) == pytest.approx([50.0, 125.0])


def test_work_that_does_not_fit_queues_and_counts_as_latency():
    p = preset([NodeGroup("n", 1, "cpu", 4, 64)])
    _, rec = run(p, [task("a", 0, 4, 100), task("b", 10, 4, 100, sla=150)])
    b = rec.tasks[1]
    assert b["queue_s"] == pytest.approx(90.0) and b["latency_s"] == pytest.approx(190.0)
    assert b["violated"]


def test_impatient_work_gives_up_and_is_a_violation():
    p = preset([NodeGroup("n", 1, "cpu", 4, 64)])
    _, rec = run(p, [task("a", 0, 4, 100), task("b", 0, 4, 10, kind="service", sla=30, patience=30)])
    assert rec.tasks[1]["dropped"] and rec.tasks[1]["violated"]


def test_power_manager_sleeps_idle_nodes_and_wakes_them_for_work():
    power = PowerManagerConfig(
        enabled=True, sleep_after_s=60, reserve_fraction=0.0, reserve_empty_fraction=0.0
    )
    p = preset([NodeGroup("n", 4, "cpu", 8, 64)], power=power)
    sim, rec = run(
        p, [task("a", 0, 2, 600), task("late", 1200, 8, 60), task("late2", 1200, 8, 60)], hours=0.5
    )
    assert rec.sleeps >= 3 and rec.wakes >= 1
    late = [t for t in rec.tasks if t["latency_s"] and t["queue_s"] and t["queue_s"] > 0]
    assert late, "a task waited for a node to wake up"
    spec = sim.nodes[0].spec
    assert rec.energy_j / (rec.window_s * 4) < spec.idle_w  # sleeping saved power


def test_battery_nodes_die_at_night_when_drained():
    group = NodeGroup("e", 1, "edge", 8, 16, battery_fraction=1.0, battery_wh=1.0, charge_w=0.0)
    p = preset([group], start_hour=20.0, drain_s=0.0)
    _, rec = run(p, [task("a", 0, 8, 3 * 3600)], hours=1.0)
    assert rec.battery_deaths >= 1
    assert rec.min_battery_pct == 0.0


def test_same_seed_same_result_and_scheduler_state_is_per_run():
    p = preset([NodeGroup("n", 3, "cpu", 8, 64)])
    tasks = [task(f"t{i}", i * 7.0, 2 + i % 3, 50 + 10 * i) for i in range(20)]
    a = summarise(run(p, tasks, "edgeplane")[1])
    b = summarise(run(p, tasks, "edgeplane")[1])
    for key in ("mean_utilization", "p99_task_latency_s", "sla_violation_rate", "mean_power_w"):
        assert a[key] == b[key]


def test_presets_describe_the_headline_fleet():
    from controlplane.sim.presets import get_preset, scale_preset

    seed = get_preset("seed-200")
    counts = {g.prefix: (g.count, g.node_type, g.gpus, g.mig_gpus, g.dpus) for g in seed.groups}
    assert seed.node_count == 200
    assert sum(c for c, t, *_ in counts.values() if t == "cpu") == 150
    assert sum(c for c, t, *_ in counts.values() if t == "gpu") == 40
    assert all(g.gpus == 2 for g in seed.groups if g.node_type == "gpu")
    assert sum(c for c, t, *_ in counts.values() if t == "dpu") == 10
    assert {c.name for c in seed.classes if c.large_gpu} == {"large-gpu-2xa100", "large-gpu-7g40gb"}
    assert scale_preset(seed, 1000).node_count == 1000
    assert get_preset("multi-cluster").federation is not None
    assert any(g.battery_fraction for g in get_preset("edge-battery").groups)
    with pytest.raises(KeyError, match="unknown preset"):
        get_preset("nope")


def test_replace_keeps_presets_frozen():
    seed = preset([NodeGroup("n", 1, "cpu", 8, 64)])
    assert replace(seed, warmup_s=5).warmup_s == 5 and seed.warmup_s == 0
