"""bench/functions_live.py: a tiny run against real ``controlplane up`` processes (the hub in a
process of its own, not the load generator's), its floors measured in the same run, its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


def test_a_tiny_functions_run_reports_each_process_cost_beside_the_floors(tmp_path: Path) -> None:
    out = tmp_path / "functions.json"
    command = [
        sys.executable, str(REPO / "bench" / "functions_live.py"), "--agents", "1", "--warm", "10",
        "--cold", "1", "--seconds", "1", "--concurrency", "2", "--floor-calls", "60", "--json", str(out),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["warm"]["n"] == 10 and report["loaded (c=2)"]["n"] > 0
    assert report["throughput"]["invocations_per_s"] > 0
    # The hub's CPU is its own process's: the load generator is measured apart from it.
    cpu = report["cpu_ms_per_invocation"]
    assert set(cpu) == {"hub", "agents", "workers", "nats", "load generator"}, cpu
    assert cpu["hub"] > 0 and cpu["agents"] > 0 and cpu["load generator"] > 0
    floors = report["floors"]
    for kind in ("http", "nats", "chain"):
        assert floors[f"{kind}_p50_ms"] > 0 and floors[f"{kind}_per_s"] > 0, floors
    assert floors["chain_cpu_ms_per_request"] > 0
    assert report["ratios"]["hub_cpu_vs_relay_cpu"] == pytest.approx(
        cpu["hub"] / floors["chain_cpu_ms_per_request"]
    )
    lines = run.stdout.splitlines()
    assert "| metric | hub | floor | ratio |" in lines
    assert any(line.startswith("| hub CPU ms per invocation |") and line.endswith("x |") for line in lines)
