"""A short chaos run in the suite: bench/chaos.py with one kill -9 of the hub, the nats-server and
each agent, under a small load; nothing lost, nothing completed twice, no two attempts at once.

The full run (10 kills of each) is a command: ``python bench/chaos.py --kills 10`` (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def test_a_short_chaos_run_loses_nothing_and_runs_nothing_twice(tmp_path):
    out = tmp_path / "chaos.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "chaos.py"), "--agents", "2", "--workloads", "12",
         "--kills", "1", "--chaos-s", "20", "--settle-s", "120", "--seed", "3", "--json", str(out)],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert out.exists(), run.stdout + run.stderr
    counts = json.loads(out.read_text())["counts"]
    assert counts["accepted"] == 12, counts
    assert (counts["lost"], counts["duplicated"], counts["overlapping"]) == (0, 0, 0), counts
    assert counts["completed"] == 12 and counts["not_ended"] == 0, counts
    assert run.returncode == 0, run.stdout[-3000:]
