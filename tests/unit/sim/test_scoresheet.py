"""The fair score sheet: served utilisation, per-class figures, energy, the power manager
switch and --load; and the figures that were there before stay as they were."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from controlplane.cli import main
from controlplane.sim.presets import get_preset, scale_load, scale_preset
from controlplane.sim.report import format_table
from controlplane.sim.runner import _data_nodes, run_comparison
from controlplane.sim.workload import generate_tasks


def small(preset="seed-200"):
    return replace(scale_preset(get_preset(preset), 20), warmup_s=300.0, drain_s=1800.0)


@pytest.fixture(scope="module")
def report():
    return run_comparison(
        preset=small(), schedulers=["default", "edgeplane", "edgeplane-no-risk"], hours=0.25, seed=5
    )


# Recorded on the commit before the score sheet (0a60445): the same run, the same numbers.
BEFORE = {
    "default": {
        "mean_utilization": 0.17704633193142308,
        "p99_task_latency_s": 1630.2037278088349,
        "sla_violation_rate": 0.02158273381294964,
        "mean_power_w": 290.88190732847744,
        "gpu_utilization": 0.3582073887548477,
        "mean_utilization_all_nodes": 0.1770463319314231,
        "tasks": 139,
        "node_sleeps": 13,
    },
    # Re-recorded after issue 13's hidden physics, where edgeplane learns interference online (a
    # deliberate change of its figures); default's are those of 0a60445. Since edgeplane weighs
    # the SLA-miss risk it learns (issue 23), these are the figures of the same profile without
    # it, ``edgeplane-no-risk``.
    "edgeplane-no-risk": {
        "mean_utilization": 0.2517373573805909,
        "p99_task_latency_s": 1630.3898638457636,
        "sla_violation_rate": 0.03597122302158273,
        "mean_power_w": 243.76843749409517,
        "gpu_utilization": 0.35844346231553353,
        "mean_utilization_all_nodes": 0.17605954708529178,
        "tasks": 139,
        "node_sleeps": 15,
    },
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_existing_figures_are_unchanged(report, name):
    run = report["runs"][name]
    for key, value in BEFORE[name].items():
        assert run[key] == pytest.approx(value, rel=1e-9), key


@pytest.mark.parametrize("name", ["default", "edgeplane"])
def test_served_utilisation_is_work_not_stretched_occupancy(report, name):
    run = report["runs"][name]
    assert 0 < run["served_utilization"] <= run["cpu_utilization_all_nodes"] + 1e-12
    assert run["served_utilization_powered_on"] <= run["cpu_utilization"] + 1e-12
    assert run["served_utilization"] <= run["served_utilization_powered_on"] + 1e-12
    assert run["offered_utilization"] == report["offered_utilization"] > 0


@pytest.mark.parametrize("name", ["default", "edgeplane"])
def test_per_class_and_per_kind_counts_add_up(report, name):
    run = report["runs"][name]
    for group in ("by_class", "by_kind"):
        items = run[group].values()
        assert sum(c["tasks"] for c in items) == run["tasks"]
        sla_tasks = sum(c["sla_tasks"] for c in items)
        violations = sum(c["sla_violations"] for c in items)
        assert violations / sla_tasks == pytest.approx(run["sla_violation_rate"])
        for c in items:
            assert c["sla_violation_rate"] == pytest.approx(c["sla_violations"] / c["sla_tasks"])
            if c["p99_queue_s"] is not None:
                assert 0 <= c["p50_queue_s"] <= c["p99_queue_s"]
    assert {"service", "batch", "analytics"} <= set(run["by_kind"])
    assert set(run["by_class"]) >= {"inference-cpu", "inference-mig"}


@pytest.mark.parametrize("name", ["default", "edgeplane"])
def test_energy_is_mean_power_times_nodes_times_hours(report, name):
    run = report["runs"][name]
    expected = run["mean_power_w"] * report["nodes"] * report["hours"] / 1000.0
    assert run["energy_kwh"] == pytest.approx(expected, rel=1e-9)
    # Per unit of work served: kWh over (served share x fleet vCPU x hours), in Wh per vCPU-hour.
    fleet_cpu = sum(g.count * g.cpu for g in small().groups)
    served_cpu_h = run["served_utilization"] * fleet_cpu * report["hours"]
    assert run["energy_per_served_cpu_hour_wh"] == pytest.approx(
        1000 * run["energy_kwh"] / served_cpu_h, rel=1e-6
    )
    assert run["power_manager"] is True
    assert report["power_manager"] == "on" and report["load"] == 1.0


def test_power_manager_off_suspends_nothing_and_both_runs_each_scheduler_twice():
    r = run_comparison(
        preset=small(), schedulers=["default-mostallocated"], hours=0.25, seed=5, power_manager="both"
    )
    off, on = r["runs"]["default-mostallocated"], r["runs"]["default-mostallocated+pm"]
    assert (off["power_manager"], on["power_manager"]) == (False, True)
    assert off["node_sleeps"] == off["node_wakes"] == 0
    assert on["node_sleeps"] > 0 and on["energy_kwh"] < off["energy_kwh"]
    assert off["served_utilization"] == pytest.approx(off["served_utilization_powered_on"])
    assert r["power_manager"] == "both"
    with pytest.raises(ValueError):
        run_comparison(preset=small(), schedulers=["default"], hours=0.1, seed=5, power_manager="maybe")


def test_load_scales_arrivals_and_keeps_the_mix():
    base = small()
    assert scale_load(base, 1.0) is base
    with pytest.raises(ValueError):
        scale_load(base, 0)
    counts = {}
    for factor in (1.0, 2.0):
        preset = scale_load(base, factor)
        tasks = generate_tasks(preset, 1.0, 11, data_nodes=_data_nodes(preset))
        counts[factor] = {cls.name: sum(t.cls == cls.name for t in tasks) for cls in preset.classes}
    total1, total2 = sum(counts[1.0].values()), sum(counts[2.0].values())
    assert 1.8 < total2 / total1 < 2.2
    for name, n in counts[1.0].items():
        if n >= 100:
            assert 1.6 < counts[2.0][name] / n < 2.4, name


def test_cli_load_and_power_manager_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("controlplane.sim.runner.get_preset", lambda name: small(name))
    out = tmp_path / "r.json"
    argv = ["simulate", "--schedulers", "volcano", "--hours", "0.1", "--seed", "3", "--quiet"]
    assert main([*argv, "--load", "1.5", "--power-manager", "off", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "load x1.5  power manager off" in table and "served utilisation (all nodes)" in table
    data = json.loads(out.read_text())
    assert data["load"] == 1.5 and data["runs"]["volcano"]["power_manager"] is False
    assert main([*argv, "--load", "0"]) == 2
    assert "--load must be a positive number" in capsys.readouterr().err


def test_the_table_reads_reports_written_before_the_score_sheet(report):
    old = json.loads(json.dumps(report))
    for run in old["runs"].values():
        del run["served_utilization"]
    assert "score sheet" not in format_table(old)
    assert "score sheet" in format_table(report)
    # A score sheet written before energy per served vCPU-hour existed: that row reads n/a.
    older = json.loads(json.dumps(report))
    for run in older["runs"].values():
        del run["energy_per_served_cpu_hour_wh"]
    row = next(line for line in format_table(older).splitlines() if line.startswith("energy per served"))
    assert row.split()[-2:] == ["n/a", "n/a"]
