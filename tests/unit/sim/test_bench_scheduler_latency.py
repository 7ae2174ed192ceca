"""bench/scheduler_latency.py: the timed run, its table and its plot, on a small fleet."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "scheduler_latency.py"
spec = importlib.util.spec_from_file_location("scheduler_latency", SCRIPT)
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_a_small_run_reports_consistent_rates_and_a_table_with_ratios(tmp_path: Path) -> None:
    results = [bench.run(profile, 120, 200, 3) for profile in ("default", "edgeplane")]
    for r in results:
        assert r["nodes"] == 120 and r["decisions"] == 200 and r["explain"] is True
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
        # Wall time includes waiting for a core: one core's rate (CPU time) is never below it.
        assert 0 < r["placements_per_s"] <= r["placements_per_cpu_s"] * 1.05
        assert 0 < r["cpu_allocated"] < 1
    text = bench.table(results)
    lines = text.splitlines()
    assert lines[0].startswith("| profile | nodes |") and len(lines) == 4
    assert lines[2].endswith("| 1.00x |")  # the first profile is the baseline
    ratio = results[1]["placements_per_s"] / results[0]["placements_per_s"]
    assert lines[3].endswith(f"| {ratio:.2f}x |")
    pytest.importorskip("matplotlib")
    bench.plot(results, str(tmp_path / "latency.png"))
    assert (tmp_path / "latency.png").stat().st_size > 1000


def test_bad_node_counts_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["scheduler_latency.py", "--nodes", "1000,lots"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert "--nodes: expected comma-separated integers" in capsys.readouterr().err
