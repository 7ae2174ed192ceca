"""The power manager's forecast reserve: nodes awake before a recurring burst, none held idle
otherwise, and fed by the requests the scheduler sees, never the arrival process."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import WorkloadRequest
from controlplane.sim.engine import Simulation
from controlplane.sim.presets import ContentionModel, NodeGroup, PowerManagerConfig, Preset
from controlplane.sim.runner import power_manager_runs
from controlplane.sim.workload import TaskSpec

GB = 10**9
PERIOD_S = 1800.0
BURST_AT = 900.0  # the burst starts at bin 15 of each half hour (60 s bins)


def _preset(power: PowerManagerConfig) -> Preset:
    return Preset(
        name="t",
        description="recurring bursts",
        groups=(NodeGroup("n", 12, "cpu", 8, 64),),
        classes=(),
        warmup_s=0.0,
        drain_s=3600.0,
        power_manager=power,
        congested_link_fraction=0.0,
        contention=ContentionModel(amplitude=0.0, io_penalty=0.0),
    )


def _task(tid: str, at: float, cpu: float, runtime: float) -> TaskSpec:
    req = WorkloadRequest(id=tid, resources=ResourceRequest(cpu=cpu, memory=GB), expected_runtime_s=runtime)
    return TaskSpec(tid, "c", "batch", at, req, runtime, None, None, False, None, True)


def _tasks(periods: int) -> list[TaskSpec]:
    """A trickle (one 1-CPU task a minute) and, each period, a burst of 2-CPU tasks every 5 s
    for 2 minutes (48 CPU, six nodes' worth)."""
    tasks = [_task(f"t{i}", 30.0 + 60.0 * i, 1, 120) for i in range(int(periods * PERIOD_S / 60))]
    for p in range(periods):
        start = p * PERIOD_S + BURST_AT
        tasks += [_task(f"b{p}-{k}", start + 5.0 * k, 2, 300) for k in range(24)]
    return sorted(tasks, key=lambda t: t.arrival_s)


def _run(power: PowerManagerConfig, periods: int = 5) -> tuple[Simulation, list[dict]]:
    sim = Simulation(_preset(power), _tasks(periods), scheduler_name="default", profile="default",
                     hours=periods * PERIOD_S / 3600.0, seed=1)  # fmt: skip
    record = sim.run()
    return sim, record.tasks


def _last_burst_wait(tasks: list[dict], periods: int) -> float:
    start = (periods - 1) * PERIOD_S + BURST_AT
    return sum(t["queue_s"] for t in tasks if start <= t["arrival_s"] < start + 120.0)


BASE = PowerManagerConfig(
    enabled=True,
    sleep_after_s=120.0,
    forecast_bin_s=60.0,
    forecast_period_s=PERIOD_S,
    forecast_floor_fraction=0.02,
    forecast_empty_fraction=0.0,
)


def test_the_forecast_wakes_nodes_before_a_recurring_burst() -> None:
    floor = replace(BASE, reserve_fraction=BASE.forecast_floor_fraction, reserve_empty_fraction=0.0)
    _, fixed_tasks = _run(floor)
    sim, forecast_tasks = _run(replace(BASE, forecast=True))
    waited_fixed = _last_burst_wait(fixed_tasks, 5)
    waited_forecast = _last_burst_wait(forecast_tasks, 5)
    # With the floor alone the burst waits for wakes (a tick plus 45 s each); with the forecast,
    # having seen four bursts at this time (the season: tests/unit/predict/test_online.py shows
    # it rising before the peak), none of the fifth burst's tasks waits.
    assert waited_fixed > 300.0
    assert waited_forecast == 0.0
    # Fed with what was requested, nothing else: the forecast's bins sum to the requested CPU.
    demand = sim.power.demand
    assert demand is not None
    requested = sum(t.request.resources.cpu * t.request.replicas for t in _tasks(5))
    assert sum(demand._closed) + demand._open == requested


def test_between_bursts_the_forecast_holds_no_more_than_its_floor_and_the_level() -> None:
    # Outside the bursts the forecast reserve is the trickle's level, far under the shipped 10%.
    sim = Simulation(_preset(replace(BASE, forecast=True)), _tasks(3), scheduler_name="default",
                     profile="default", hours=1.5, seed=1)  # fmt: skip
    sim.run()
    pool = [n for n in sim.nodes if n.state != "dead"]
    at_quiet = 2 * PERIOD_S + 1500.0  # 10 minutes after the third burst, bins of trickle since
    reserve, empty = sim.power.reserves(pool, at_quiet)
    assert reserve < 0.10 * sum(n.cpu for n in pool)
    assert empty == 1  # the minimum of one awake, empty node


def test_forecast_mode_runs_the_power_manager_with_its_forecast() -> None:
    preset = _preset(BASE)
    runs = list(power_manager_runs(["edgeplane"], "forecast", preset))
    assert [(name, p.power_manager.enabled, p.power_manager.forecast) for name, _, p in runs] == [
        ("edgeplane", True, True)
    ]


def test_the_power_manager_never_reads_the_arrival_process() -> None:
    # The burst windows and rates live in sim.workload: the manager must learn them from requests.
    source = Path(__file__).resolve().parents[3] / "controlplane" / "sim" / "power_manager.py"
    imported = {
        node.module
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "controlplane.sim.workload" not in imported
    assert not any("physics_params" in m for m in imported)
