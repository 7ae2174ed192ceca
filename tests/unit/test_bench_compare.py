"""bench/compare.py: medians, ratios and the SLOWER flag in both directions, the table, and the
refusal of unknown benches (the runs themselves: tests/functional/test_bench_compare.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "compare.py"
spec = importlib.util.spec_from_file_location("bench_compare", SCRIPT)
assert spec is not None and spec.loader is not None
compare = importlib.util.module_from_spec(spec)
sys.modules["bench_compare"] = compare  # dataclasses look their module up while the class is built
spec.loader.exec_module(compare)

LATENCY = compare.Metric("latency (ms)", ("p50",))
RATE = compare.Metric("rate (/s)", ("per_s",), higher_is_better=True)
STEADY = compare.Metric("steady (ms)", ("x",))
FEWER = compare.Metric("fewer (/s)", ("y",), higher_is_better=True)
SAMPLES = {
    "ref": {"latency (ms)": [10.0, 9.0, 11.0], "rate (/s)": [100.0, 100.0], "steady (ms)": [5.0, 5.0],
            "fewer (/s)": [100.0, 100.0]},
    "tree": {"latency (ms)": [12.5, 12.0, 13.0], "rate (/s)": [120.0, 130.0], "steady (ms)": [5.5, 5.5],
             "fewer (/s)": [80.0, 80.0]},
}  # fmt: skip


def test_a_figure_more_than_20_percent_worse_in_its_bad_direction_is_flagged_slower() -> None:
    rows = {row["metric"]: row for row in compare.summarize(SAMPLES, [LATENCY, RATE, STEADY, FEWER])}
    assert (rows["latency (ms)"]["ref"], rows["latency (ms)"]["tree"]) == (10.0, 12.5)  # medians
    assert rows["latency (ms)"]["ratio"] == pytest.approx(1.25)
    assert rows["latency (ms)"]["slower"] is True  # 25% more time
    assert rows["rate (/s)"]["slower"] is False  # more per second is better, however much
    assert rows["steady (ms)"]["slower"] is False  # 10% worse: within the allowance
    assert rows["fewer (/s)"]["slower"] is True  # 100/80 = 1.25x fewer per second
    assert rows["fewer (/s)"]["ref_runs"] == [100.0, 100.0]
    assert rows["fewer (/s)"]["tree_runs"] == [80.0, 80.0]


def test_the_table_has_one_row_per_metric_with_its_ratio_and_flag() -> None:
    text = compare.table(compare.summarize(SAMPLES, [LATENCY, RATE]), "HEAD")
    lines = text.splitlines()
    assert lines[0] == "| metric | HEAD median | tree median | tree/ref | |"
    assert lines[2] == "| latency (ms) (lower is better) | 10.00 | 12.50 | 1.25x | SLOWER |"
    assert lines[3] == "| rate (/s) (higher is better) | 100.00 | 125.00 | 1.25x |  |"


def test_every_bench_names_figures_its_json_has() -> None:
    burst = {
        "accepted_s": 1.0,
        "drained_per_s": 2.0,
        "hub_cpu_ms_per_workload": 3.0,
        "agents_cpu_ms_per_workload": 4.0,
    }
    functions = {"warm": {"p50_ms": 1.0}, "cold": {"p50_ms": 2.0}, "loaded": {"p50_ms": 3.0},
                 "throughput": {"invocations_per_s": 4.0}}  # fmt: skip
    lifecycle = {"post_to_running_ms": {"p50": 1.0}, "post_to_succeeded_observed_ms": {"p50": 2.0}}
    heartbeat = {"runs": [{"hub_cpu_cores": 0.1, "cpu_ratio": 3.0, "hub_cpu_us_per_heartbeat": 50.0,
                           "register_s": 5.0}]}  # fmt: skip
    for bench, report in zip(compare.BENCHES, (burst, functions, lifecycle, heartbeat), strict=True):
        assert (SCRIPT.parent / bench.script).exists()
        assert all(metric.read(report) > 0 for metric in bench.metrics)


def test_unknown_benches_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        compare.parse_args(["HEAD", "--benches", "burst,warp"])
    assert exc.value.code == 2
    assert "--benches: unknown ['warp']" in capsys.readouterr().err


def test_the_heartbeat_bench_runs_only_when_named_and_a_storm_not_absorbed_reads_as_the_worst() -> None:
    assert [b.name for b in compare.parse_args(["HEAD"]).benches] == ["burst", "functions", "lifecycle"]
    assert [b.name for b in compare.parse_args(["HEAD", "--benches", "heartbeat"]).benches] == ["heartbeat"]
    (heartbeat,) = [b for b in compare.BENCHES if b.name == "heartbeat"]
    storm = next(m for m in heartbeat.metrics if "storm" in m.name)
    assert storm.read({"runs": [{"register_s": None}]}) == float("inf")
