"""bench/heartbeat_scale.py: a tiny fleet of impersonated agents against a real ``controlplane
serve`` (nats-server, SQLite), its floor measured in the same run, its table, JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]
AGENTS = 50


def test_a_tiny_fleet_heartbeats_without_a_false_expiry_and_reports_its_cost_beside_the_floor(
    tmp_path: Path,
) -> None:
    out = tmp_path / "heartbeats.json"
    png: Path | None = tmp_path / "heartbeats.png"
    command = [
        sys.executable, str(REPO / "bench" / "heartbeat_scale.py"), "--agents", str(AGENTS),
        "--seconds", "3", "--warmup", "1", "--json", str(out),
    ]  # fmt: skip
    try:
        import matplotlib  # noqa: F401

        command += ["--plot", str(png)]
    except ImportError:
        png = None
    run = subprocess.run(command, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (only,) = json.loads(out.read_text())["runs"]
    assert {"agents", "hub_cpu_cores", "rss_mb", "lag_p99_ms", "false_not_ready"} <= set(only)
    assert only["agents"] == AGENTS and only["nodes_known"] == AGENTS, only
    assert only["false_not_ready"] == 0 and only["not_ready_at_end"] == 0, only
    assert 0 < only["hub_cpu_cores"] < 2 and only["floor_cpu_cores"] >= 0 and only["rss_mb"] > 10
    # The hub's histogram saw the heartbeats: a p99 bucket bound, under a lease (3 s).
    assert only["lag_p99_ms"] is not None and 0 < only["lag_p99_ms"] <= 2500, only
    assert only["heartbeats_sent"] >= AGENTS * 3
    # The generator's own schedule, measured: a first heartbeat within its 1 Hz slot of admission.
    assert 0 <= only["generator_late_max_ms"] and 0 <= only["first_heartbeat_gap_max_ms"] < 3000, only
    lines = run.stdout.splitlines()
    assert any(line.startswith(f"| {AGENTS} |") and line.count("|") == 12 for line in lines), run.stdout
    if png is not None:
        assert png.stat().st_size > 1000
