"""A short chaos run in the suite: bench/chaos.py with one kill -9 of the hub, the nats-server and
each agent (the ``mixed`` scenario), and one agent cut off the network (``partition``, in a network
namespace: needs root), under a small load of workloads and function invocations: nothing lost,
nothing run twice, no two attempts at once, no invocation without an answer.

The full run (10 hits of each component) is a command: ``python bench/chaos.py --kills 10``
(docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]


def test_a_short_chaos_run_loses_nothing_and_runs_nothing_twice(tmp_path):
    out = tmp_path / "chaos.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "chaos.py"), "--agents", "2", "--workloads", "10",
         "--invocations", "12", "--kills", "1", "--chaos-s", "20", "--settle-s", "120", "--seed", "3",
         "--scenarios", "mixed,partition", "--json", str(out)],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert out.exists(), run.stdout + run.stderr
    result = json.loads(out.read_text())
    mixed = result["scenarios"]["mixed"]
    assert mixed["workloads"]["accepted"] == 10 and mixed["invocations"]["accepted"] == 12, mixed
    assert mixed["workloads"]["completed"] == 10 and mixed["workloads"]["not_ended"] == 0, mixed
    partition = result["scenarios"]["partition"]
    if os.geteuid() != 0:
        assert "skipped" in partition, partition
    else:
        assert partition["workloads"]["completed"] == 10, partition
    for name, scenario in result["scenarios"].items():
        if "skipped" in scenario:
            continue
        counts = {k: scenario[k] for k in ("lost", "duplicated", "overlapping", "hung")}
        assert counts == {"lost": 0, "duplicated": 0, "overlapping": 0, "hung": 0}, (name, scenario)
    assert run.returncode == 0, run.stdout[-3000:]
