"""bench/compare.py: REF checked out in a worktree, the burst bench run on it and on the working
tree, the table and JSON, and the worktree gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120)]

REPO = Path(__file__).resolve().parents[2]


def worktrees() -> list[str]:
    listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    return [line for line in listing.splitlines() if line.startswith("worktree ")]


def test_a_quick_compare_against_head_prints_both_medians_and_removes_its_worktree(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compare.py"), "HEAD", "--quick", "--rounds", "1",
         "--benches", "burst", "--json", str(out)],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]  # 1: noise flagged SLOWER
    report = json.loads(out.read_text())
    assert report["ref"] == "HEAD" and len(report["ref_commit"]) == 40 and report["rounds"] == 1
    names = [row["metric"] for row in report["rows"]]
    assert names == [
        "burst: POSTs accepted (s)",
        "burst: drained workloads/s",
        "burst: hub CPU ms/workload",
        "burst: agents' CPU ms/workload",
    ]
    for row in report["rows"]:
        assert len(row["ref_runs"]) == len(row["tree_runs"]) == 1 and row["ref"] > 0 and row["tree"] > 0
        assert row["ratio"] == pytest.approx(row["tree"] / row["ref"])
    assert (run.returncode == 1) == bool(report["slower"])
    assert "| metric | HEAD median | tree median | tree/ref | |" in run.stdout
    assert "round 1/1: burst on ref" in run.stdout and "round 1/1: burst on tree" in run.stdout
    assert not [tree for tree in worktrees() if "edgeplane-compare-" in tree]
