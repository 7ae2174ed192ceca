"""``controlplane simulate-functions`` end to end on the fixture trace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from controlplane.cli import main

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "azure_small" / "original"


def test_writes_json_with_every_policys_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = main(
        [
            "simulate-functions",
            "--trace",
            "azure",
            "--trace-dir",
            str(FIXTURE),
            "--policies",
            "fixed-10m,no-keepalive,hybrid,edgeplane",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"fixed-10m", "no-keepalive", "hybrid", "edgeplane"}
    for m in doc["policies"].values():
        assert 0.0 <= m["cold_start_rate"] <= 1.0 and 0.0 <= m["cold_start_rate_p75_function"] <= 1.0
        assert m["wasted_memory_gb_s"] >= 0 and m["p99_latency_ms"] >= m["p50_latency_ms"]
    assert doc["policies"]["no-keepalive"]["cold_start_rate"] == 1.0
    assert doc["trace"]["invocations"] == 3 + 42 + 200 + 20152
    assert doc["ratios_vs_fixed_10m"]["fixed-10m"]["wasted_memory_gb_s"] == 1.0
    printed = capsys.readouterr()
    assert "vs fixed-10m" in printed.out
    # Progress goes to stderr: stdout is the trace line and the two tables alone.
    assert "simulated" not in printed.out and "  simulated edgeplane in " in printed.err


def test_synthetic_trace_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    argv = ["simulate-functions", "--trace", "synthetic", "--functions", "20", "--hours", "2"]
    assert main([*argv, "--policies", "fixed-10m,hybrid", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_exits_2_naming_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["simulate-functions", "--trace", "azure", "--trace-dir", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert main(["simulate-functions", "--trace", "synthetic", "--policies", "fixed-10m,warmest"]) == 2
    assert "'warmest'" in capsys.readouterr().err
    assert main(["simulate-functions", "--trace", "azure"]) == 2
    assert "--trace-dir" in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    rc = main(["simulate-functions", "--trace", "synthetic", "--plot", str(tmp_path / "x.png")])
    assert rc == 2
    assert "pip install 'edgeplane[plot]'" in capsys.readouterr().err
