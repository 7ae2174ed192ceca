"""Reading the Azure Functions 2019 trace in both layouts, and materialising arrivals."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from controlplane.serverless.traces import TraceFormatError, load_azure_trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "azure_small"
SAMPLES = FIXTURES / "samples"
ORIGINAL = FIXTURES / "original"


def test_both_layouts_read_to_the_same_functions() -> None:
    a = load_azure_trace(SAMPLES)
    b = load_azure_trace(ORIGINAL)
    assert (a.layout, b.layout) == ("samples", "original")
    assert a.minutes == b.minutes == 1440
    assert [f.function_id for f in a.functions] == [f.function_id for f in b.functions]
    assert [f.invocations for f in a.functions] == [3, 42, 200, 20152]
    for fa, fb in zip(a.functions, b.functions, strict=True):
        assert np.array_equal(fa.per_minute, fb.per_minute)
        assert fa.duration_ms == fb.duration_ms and fa.duration_ms is not None
        assert fa.memory_mb == fb.memory_mb and fa.memory_mb is not None
    assert b.functions[0].trigger == "others" and a.functions[0].trigger is None


def test_reader_goes_by_column_names_not_positions(tmp_path: Path) -> None:
    rows = (SAMPLES / "mem.csv").read_text().splitlines()
    cols = [r.split(",") for r in rows]
    swapped = [",".join([c[1], c[0], *c[2:]]) for c in cols]  # HashOwner before HashApp
    for name in ("inv.csv", "run.csv"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    (tmp_path / "mem.csv").write_text("\n".join(swapped) + "\n")
    assert [f.memory_mb for f in load_azure_trace(tmp_path).functions] == [
        f.memory_mb for f in load_azure_trace(SAMPLES).functions
    ]


def test_functions_and_hours_truncate_the_trace() -> None:
    t = load_azure_trace(SAMPLES, functions=2, hours=6)
    assert len(t.functions) == 2 and t.minutes == 360
    assert all(len(f.per_minute) == 360 for f in t.functions)
    assert t.to_workload().horizon_s == 6 * 3600.0


def test_spreading_keeps_each_minutes_count_and_is_seeded_per_function() -> None:
    trace = load_azure_trace(SAMPLES)
    w1 = trace.to_workload(seed=7)
    w2 = trace.to_workload(seed=7)
    w3 = trace.to_workload(seed=8)
    only_first = load_azure_trace(SAMPLES, functions=1).to_workload(seed=7)
    for rec, f in zip(trace.functions, w1.functions, strict=True):
        per_minute = np.bincount((f.arrivals_s // 60).astype(int), minlength=1440)
        assert np.array_equal(per_minute, rec.per_minute)
        assert np.all(np.diff(f.arrivals_s) >= 0)
        lo, hi = rec.duration_ms[0] / 1000, rec.duration_ms[-1] / 1000  # type: ignore[index]
        assert np.all((f.durations_s >= lo - 1e-9) & (f.durations_s <= hi + 1e-9))
    assert all(
        np.array_equal(a.arrivals_s, b.arrivals_s) for a, b in zip(w1.functions, w2.functions, strict=True)
    )
    assert not np.array_equal(w1.functions[3].arrivals_s, w3.functions[3].arrivals_s)
    assert np.array_equal(only_first.functions[0].arrivals_s, w1.functions[0].arrivals_s)


def test_equidistant_spread_places_a_minutes_invocations_evenly() -> None:
    w = load_azure_trace(SAMPLES).to_workload(spread="equidistant")
    f = w.functions[3]  # invoked every minute
    first_minute = f.arrivals_s[f.arrivals_s < 60.0]
    k = len(first_minute)
    assert np.allclose(first_minute, (np.arange(k) + 0.5) / k * 60.0)


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    shutil.copytree(SAMPLES, d)
    return d


def test_a_non_integer_count_names_the_file_line_and_column(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    lines = (d / "inv.csv").read_text().splitlines()
    cells = lines[2].split(",")
    cells[3 + 9] = "x7"  # minute_10
    lines[2] = ",".join(cells)
    (d / "inv.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_azure_trace(d)
    assert err.value.column == "minute_10" and err.value.line == 3
    assert "inv.csv:3" in str(err.value) and "not an integer" in str(err.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    text = (d / "run.csv").read_text().replace("percentile_Average_99", "p99", 1)
    (d / "run.csv").write_text(text)
    with pytest.raises(TraceFormatError, match="percentile_Average_99: required column is missing"):
        load_azure_trace(d)


def test_a_short_row_and_a_negative_count_are_rejected(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    lines = (d / "mem.csv").read_text().splitlines()
    lines[1] = ",".join(lines[1].split(",")[:-1])
    (d / "mem.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=r"mem.csv:2: -: row has 11 fields, header has 12"):
        load_azure_trace(d)
    d2 = tmp_path / "neg"
    shutil.copytree(SAMPLES, d2)
    text = (d2 / "inv.csv").read_text().splitlines()
    cells = text[1].split(",")
    cells[3] = "-1"
    text[1] = ",".join(cells)
    (d2 / "inv.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(TraceFormatError, match="minute_1: negative count"):
        load_azure_trace(d2)


def test_a_missing_or_unrecognised_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_azure_trace(tmp_path / "absent")
    with pytest.raises(TraceFormatError, match=r"no inv\.csv"):
        load_azure_trace(tmp_path)
