"""Whole runs: determinism by seed, the CLI's table, JSON and argument errors."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from controlplane.cli import main
from controlplane.sim import cli as sim_cli
from controlplane.sim.presets import get_preset, scale_preset
from controlplane.sim.runner import run_comparison

TIMING = {
    "decisions_per_s",
    "p99_decision_latency_ms",
    "p50_decision_latency_ms",
    "wall_s",
    "pending_retry_time_s",
}


def small(preset="seed-200"):
    return replace(scale_preset(get_preset(preset), 20), warmup_s=300.0, drain_s=1800.0)


def strip(report):
    return {
        name: {k: v for k, v in metrics.items() if k not in TIMING}
        for name, metrics in report["schedulers"].items()
    }


def test_same_seed_same_numbers_and_another_seed_differs():
    a = run_comparison(preset=small(), schedulers=["default", "edgeplane"], hours=0.25, seed=5)
    b = run_comparison(preset=small(), schedulers=["default", "edgeplane"], hours=0.25, seed=5)
    c = run_comparison(preset=small(), schedulers=["default", "edgeplane"], hours=0.25, seed=6)
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)
    assert a["tasks_measured"] > 50


@pytest.mark.parametrize("preset", ["multi-cluster", "edge-battery"])
def test_other_presets_run(preset):
    report = run_comparison(preset=small(preset), schedulers=["edgeplane"], hours=0.2, seed=1)
    assert report["schedulers"]["edgeplane"]["tasks"] > 0


def test_cli_prints_the_table_and_writes_the_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("controlplane.sim.runner.get_preset", lambda name: small(name))
    out = tmp_path / "r.json"
    code = main(
        [
            "simulate",
            "--schedulers",
            "default,binpack",
            "--hours",
            "0.1",
            "--seed",
            "3",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "SLA violation rate" in table and "ratio vs default" in table
    report = json.loads(out.read_text())
    assert set(report) >= {"schedulers", "preset", "seed", "hours"}
    assert report["seed"] == 3 and report["hours"] == 0.1
    for metrics in report["schedulers"].values():
        for key in (
            "mean_utilization",
            "p99_task_latency_s",
            "sla_violation_rate",
            "mean_power_w",
            "gpu_utilization",
            "large_gpu_schedulability",
            "decisions_per_s",
            "p99_decision_latency_ms",
        ):
            assert isinstance(metrics[key], float)
        for key in ("mean_utilization", "sla_violation_rate", "gpu_utilization", "large_gpu_schedulability"):
            assert 0.0 <= metrics[key] <= 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "seed-9"], "unknown preset 'seed-9'"),
        (["--schedulers", "default,nope"], "unknown scheduler 'nope'"),
        (["--hours", "-1"], "--hours must be a positive number"),
        (["--hours", "0"], "--hours must be a positive number"),
        (["--nodes", "0"], "--nodes must be a positive integer"),
        (["--schedulers", "default,default"], "twice"),
        (["--profile", "broken"], "NAME=FILE"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(argv, message, capsys):
    assert main(["simulate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    real = sim_cli.importlib.util.find_spec
    monkeypatch.setattr(
        sim_cli.importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a)
    )
    assert main(["simulate", "--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install 'edgeplane[plot]'" in capsys.readouterr().err


def test_configure_declares_the_documented_flags():
    parser = argparse.ArgumentParser()
    sim_cli.configure(parser)
    args = parser.parse_args([])
    # --schedulers: None means the preset's own default (see runner.default_schedulers).
    assert (args.preset, args.schedulers, args.hours, args.seed) == ("seed-200", None, 1.0, 42)


def test_progress_counts_the_hours_asked_for_and_never_runs_past_them() -> None:
    from controlplane.sim.cli import progress_line

    window = (1800.0, 1800.0 + 2.5 * 3600)  # 30 min warm-up, 2.5 h measured
    assert progress_line(900.0, window) == "warming up (0.2/0.5 h)"
    assert progress_line(1800.0 + 3600, window) == "simulated 1.0/2.5 h"
    assert progress_line(window[1], window) == "simulated 2.5/2.5 h"
    late = progress_line(window[1] + 1800, window)
    assert late == "simulated 2.5/2.5 h, draining the work still running (+0.5 h)"
