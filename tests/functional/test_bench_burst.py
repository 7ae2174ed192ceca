"""bench/burst.py: a tiny burst against a real ``controlplane up`` (nats-server, hub, agent
processes), its floors measured in the same run, its table, JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(90)]

REPO = Path(__file__).resolve().parents[2]


def test_a_tiny_burst_drains_every_workload_and_reports_its_cost_beside_the_floors(tmp_path: Path) -> None:
    out, png = tmp_path / "burst.json", tmp_path / "burst.png"
    command = [
        sys.executable, str(REPO / "bench" / "burst.py"), "--workloads", "12", "--concurrency", "4",
        "--agents", "1", "--timeout", "60", "--json", str(out),
    ]  # fmt: skip
    plotting = True
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        plotting = False
    if plotting:
        command += ["--plot", str(png)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=80)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["accepted"] == 12 and report["refused"] == {}, report
    assert sum(report["terminal"].values()) == 12 and report["terminal"]["Succeeded"] == 12, report
    assert 0 < report["accepted_s"] <= report["drained_s"]
    assert report["drained_per_s"] == pytest.approx(12 / report["drained_s"])
    assert report["hub_cpu_s"] > 0
    assert report["hub_cpu_ms_per_workload"] == pytest.approx(1000 * report["hub_cpu_s"] / 12)
    floors = report["floors"]
    assert set(floors) >= {"http_post_wall_s", "http_cpu_ms_per_request", "sqlite_cpu_ms_per_row"}
    assert all(value > 0 for value in floors.values()), floors
    assert report["ratios"]["hub_cpu_vs_http_cpu"] == pytest.approx(
        report["hub_cpu_ms_per_workload"] / floors["http_cpu_ms_per_request"]
    )
    assert set(report["ratios"]) == {
        "accepted_vs_http_post",
        "hub_cpu_vs_http_cpu",
        "hub_cpu_vs_sqlite_insert_cpu",
    }
    lines = run.stdout.splitlines()
    assert "| metric | hub | floor | ratio |" in lines
    assert any(line.startswith("| hub CPU per workload (ms) |") and line.endswith("x |") for line in lines)
    if plotting:
        assert png.stat().st_size > 1000
