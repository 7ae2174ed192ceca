"""bench/summarize_runs.py: means over seeds and ratios against one scheduler."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "summarize_runs.py"
spec = importlib.util.spec_from_file_location("summarize_runs", SCRIPT)
assert spec is not None and spec.loader is not None
summarize_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize_runs)


def _report(seed: int, sla: dict[str, float], battery: dict[str, float]) -> dict:
    runs = {}
    for name in sla:
        runs[name] = {
            "mean_utilization": 0.5,
            "p99_task_latency_s": 100.0,
            "sla_violation_rate": sla[name],
            "mean_power_w": 20.0,
            "battery_energy_kwh": battery[name],
            "depleted_batteries": 0,
            "battery_nodes": 4,
            "decisions_per_s": 1000.0,
            "p99_decision_latency_ms": 1.0,
        }
    return {"preset": "edge-battery", "hours": 24, "seed": seed, "runs": runs}


def test_means_and_ratios_over_seeds(tmp_path, capsys):
    files = []
    for seed, (a, b), (ea, eb) in ((1, (0.01, 0.02), (1.0, 0.5)), (2, (0.03, 0.02), (1.0, 1.5))):
        path = tmp_path / f"r{seed}.json"
        path.write_text(
            json.dumps(_report(seed, {"edgeplane": a, "learned": b}, {"edgeplane": ea, "learned": eb}))
        )
        files.append(str(path))
    out = tmp_path / "summary.json"
    assert summarize_runs.main([*files, "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["seeds"] == [1, 2]
    assert summary["means"]["edgeplane"]["sla_violation_rate"]["mean"] == pytest.approx(0.02)
    assert summary["means"]["learned"]["sla_violation_rate"]["seeds"] == [0.02, 0.02]
    assert summary["ratios"]["learned"]["battery_energy_kwh"] == pytest.approx(1.0)
    assert "ratio vs edgeplane" in capsys.readouterr().out


def test_mismatched_reports_are_refused(tmp_path, capsys):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(_report(1, {"edgeplane": 0.1}, {"edgeplane": 1.0})))
    other = _report(2, {"edgeplane": 0.1}, {"edgeplane": 1.0})
    other["hours"] = 6
    b.write_text(json.dumps(other))
    assert summarize_runs.main([str(a), str(b)]) == 2
    assert "differ" in capsys.readouterr().err
    assert summarize_runs.main([str(a), "--against", "nobody"]) == 2
