"""The Azure VM trace: the reader on the fixture slice, its errors, and a short replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from controlplane.cli import main
from controlplane.sim.vmreplay import VM_PATIENCE_S, offered_cpu, run_trace_comparison, size_fleet, vm_tasks
from controlplane.sim.vmtrace import BIN_S, TraceFormatError, load_vm_trace

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "azure_vm"


def test_reader_pairs_flavors_and_durations_token_by_token() -> None:
    trace = load_vm_trace(FIXTURE)
    assert trace.split == "dev" and trace.bins == 24 and trace.hours == 2.0
    assert (trace.first_t, trace.censor_t) == (1_800_000.0, 2_100_000.0)
    assert len(trace.flavors) == 16
    assert trace.flavors["d"].vcpus == 16 and trace.flavors["d"].memory_gb == 112
    assert trace.flavors["a"].vcpus == 1 and trace.flavors["a"].memory_gb == 0.75
    assert len(trace.vms) == 5689 and trace.censored == 165 and trace.batches == 1327
    # The first line: "m,|,a,|,g,g,g,g,g,g,g,k,k,..." against "U1,|,U4,|,U3,U3,U1,U3,U1,U0,...".
    first = trace.vms[:4]
    assert [v.flavor.letter for v in first] == ["m", "a", "g", "g"]
    assert [v.duration_bin for v in first] == [1, 4, 3, 3]
    assert [v.batch for v in first] == [0, 1, 2, 2]
    assert all(v.bin == 0 and not v.censored for v in first)
    assert trace.vms[-1].bin == 23 and trace.vms[-1].batch == trace.batches - 1


def test_lifetimes_come_from_the_interval_map_and_censoring() -> None:
    trace = load_vm_trace(FIXTURE)
    assert trace.intervals[0] == (0.0, 0.0)
    assert trace.intervals[13] == (3900.0, 7200.0)  # the bins widen past an hour
    u13 = next(v for v in trace.vms if v.duration_bin == 13 and not v.censored)
    assert trace.lifetime_range(u13) == (3900.0, 7500.0)
    c = next(v for v in trace.vms if v.censored)
    low, high = trace.lifetime_range(c)
    assert low == 2_100_000 - (1_800_000 + c.bin * BIN_S) and high == float("inf")
    tasks = {t.id: t for t in vm_tasks(trace, seed=1)}
    index = trace.vms.index(c)
    assert tasks[f"vm-{index}"].runtime_s == low  # runs to T: past the end of any replay
    for i, vm in enumerate(trace.vms[:500]):
        lo, hi = trace.lifetime_range(vm)
        if not vm.censored:
            assert lo <= tasks[f"vm-{i}"].runtime_s <= hi or tasks[f"vm-{i}"].runtime_s == 1.0


def test_a_batch_arrives_at_one_instant_in_its_bin_as_separate_requests() -> None:
    trace = load_vm_trace(FIXTURE)
    tasks = vm_tasks(trace, seed=3)
    by_batch: dict[str, set[float]] = {}
    for t in tasks:
        assert t.request.replicas == 1 and t.sla_s is None and t.patience_s == VM_PATIENCE_S
        assert t.kind == "service" and t.request.expected_runtime_s is None
        by_batch.setdefault(t.request.name, set()).add(t.arrival_s)
    assert len(by_batch) == trace.batches
    assert all(len(times) == 1 for times in by_batch.values())
    vm0 = next(t for t in tasks if t.id == "vm-0")
    assert 0 <= vm0.arrival_s < BIN_S and vm0.request.resources.cpu == 8  # "m": 8 vCPU, 14 GB
    assert [t.arrival_s for t in tasks] == sorted(t.arrival_s for t in tasks)
    assert [t.runtime_s for t in vm_tasks(trace, seed=3)] == [t.runtime_s for t in tasks]


def test_hours_caps_the_replay_and_a_short_replay_is_a_prefix() -> None:
    full = load_vm_trace(FIXTURE)
    half = load_vm_trace(FIXTURE, hours=0.5)
    assert half.bins == 6 and half.hours == 0.5
    assert all(v.bin < 6 for v in half.vms)
    assert half.vms == full.vms[: len(half.vms)]
    assert half.batches == len({v.batch for v in half.vms})
    short, long = vm_tasks(half, seed=9), vm_tasks(full, seed=9)
    by_id = {t.id: t for t in long}
    assert all(by_id[t.id].arrival_s == t.arrival_s and by_id[t.id].runtime_s == t.runtime_s for t in short)
    assert load_vm_trace(FIXTURE, hours=100).bins == 24  # past the split's end: all of it


def test_offered_cpu_and_fleet_sizing() -> None:
    tasks = vm_tasks(load_vm_trace(FIXTURE, hours=1), seed=1)
    work, peak = offered_cpu(tasks, 3600.0)
    assert 0 < work <= peak * 3600.0
    assert size_fleet(peak) * 64 * 0.8 >= peak > (size_fleet(peak) - 1) * 64 * 0.8


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    shutil.copytree(FIXTURE, d)
    return d


def _edit(path: Path, line: int, old: str, new: str) -> None:
    lines = path.read_text().splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("file", "line", "old", "new", "message"),
    [
        ("v1.dev.txt", 3, " m,", " z,", "v1.dev.txt:3: token 1: unknown flavor 'z'"),
        ("v1.dev.c2100000.txt", 2, " U", " X", "v1.dev.c2100000.txt:2: token 1: not U<bin> or C<bin>"),
        ("v1.dev.c2100000.txt", 4, " U0,", " U99,", "token 1: duration bin 99 is not in v1.interval_map.txt"),
        ("v1.dev.c2100000.txt", 5, ",|", "", "v1.dev.c2100000.txt:5: tokens:"),
        ("v1.dev.c2100000.txt", 6, "1801500", "1801800", "v1.dev.c2100000.txt:6: time:"),
        ("flav_map.txt", 4, "16,112", "16;112", "flav_map.txt:4: size:"),
        ("v1.interval_map.txt", 3, "600 2", "600 x", "v1.interval_map.txt:3: bin: not a bin number"),
    ],
)
def test_a_malformed_file_fails_with_file_and_line(
    tmp_path: Path, file: str, line: int, old: str, new: str, message: str
) -> None:
    d = _copy(tmp_path)
    _edit(d / file, line, old, new)
    with pytest.raises(TraceFormatError) as info:
        load_vm_trace(d)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_times_must_rise_on_the_grid(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    for name in ("v1.dev.txt", "v1.dev.c2100000.txt"):
        _edit(d / name, 7, "1801800", "1801750")
    with pytest.raises(TraceFormatError, match=r"v1\.dev\.txt:7: time: 1801750 is not on the 300 s grid"):
        load_vm_trace(d)
    for name in ("v1.dev.txt", "v1.dev.c2100000.txt"):
        _edit(d / name, 7, "1801750", "1801200")
    with pytest.raises(TraceFormatError, match=r"v1\.dev\.txt:7: time: 1801200 does not follow 1801500"):
        load_vm_trace(d)


def test_missing_files_are_named(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    (d / "v1.dev.c2100000.txt").unlink()
    with pytest.raises(TraceFormatError, match=r"v1\.dev\.c<T>\.txt: -: no censoring file"):
        load_vm_trace(d)
    with pytest.raises(TraceFormatError, match=r"v1\.test\.txt: -: cannot open"):
        shutil.copy(FIXTURE / "v1.dev.c2100000.txt", d / "v1.test.c2100000.txt")
        load_vm_trace(d, split="test")
    (d / "flav_map.txt").unlink()
    with pytest.raises(TraceFormatError, match=r"flav_map\.txt: -: cannot open"):
        load_vm_trace(d)


def test_a_short_durations_file_is_caught(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    path = d / "v1.dev.c2100000.txt"
    path.write_text("\n".join(path.read_text().splitlines()[:20]) + "\n")
    with pytest.raises(TraceFormatError, match=r"20 lines where v1\.dev\.txt has 24"):
        load_vm_trace(d)
    assert load_vm_trace(d, hours=1).bins == 12  # the cap stops before the missing lines


def test_replay_reports_acceptance_and_fragmentation() -> None:
    trace = load_vm_trace(FIXTURE, hours=0.5)
    # A fleet far too small for the half hour, so that requests queue, fragment and give up.
    report = run_trace_comparison(trace, schedulers=["default", "binpack"], seed=2, nodes=8)
    assert report["nodes"] == 8 and report["tasks_measured"] == len(trace.vms)
    assert "Resource Central" in report["trace"]["credit"]
    for run in report["runs"].values():
        assert run["vms"] == len(trace.vms)
        assert 0 < run["acceptance_rate"] < 1
        assert run["rejected"] == round(run["vms"] * (1 - run["acceptance_rate"]))
        assert run["fragmented_arrivals"] + run["no_room_arrivals"] > 0
        assert run["fragmentation_rate"] == run["fragmented_arrivals"] / run["vms"]
        assert run["p99_queue_s"] <= VM_PATIENCE_S + 1e-6
        assert 0 < run["served_of_offered"] < 1
        assert run["served_cpu_utilization"] <= 1 and run["energy_kwh"] > 0
        assert run["mean_nodes_powered"] == pytest.approx(8)  # too busy to suspend any
    roomy = run_trace_comparison(trace, schedulers=["default"], seed=2)
    run = roomy["runs"]["default"]
    assert roomy["peak_offered_fraction"] <= 0.8 and run["acceptance_rate"] == 1.0
    assert run["served_of_offered"] == pytest.approx(1.0)


def test_cli_replays_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vm.json"
    args = ["simulate", "--trace", "azure-vm", "--trace-dir", str(FIXTURE), "--hours", "0.25"]
    code = main([*args, "--schedulers", "default,edgeplane", "--nodes", "12", "--json", str(out), "--quiet"])
    assert code == 0
    table = capsys.readouterr().out
    assert "fragmented at arrival" in table and "Resource Central" in table
    report = json.loads(out.read_text())
    assert set(report["runs"]) == {"default", "edgeplane"} and report["nodes"] == 12
    assert main(["simulate", "--trace", "azure-vm", "--quiet"]) == 2
    assert "needs --trace-dir" in capsys.readouterr().err
    assert main([*args, "--split", "nope", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad trace:" in err and "v1.nope.c<T>.txt" in err


def test_the_replay_runs_each_scheduler_with_and_without_the_power_manager(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = load_vm_trace(FIXTURE, hours=0.5)
    # A roomy fleet (peak at 30%): with the power manager, empty hosts go to sleep.
    report = run_trace_comparison(trace, schedulers=["binpack"], seed=2, nodes=30, power_manager="both")
    off, on = report["runs"]["binpack"], report["runs"]["binpack+pm"]
    assert (off["power_manager"], on["power_manager"], report["power_manager"]) == ("off", "on", "both")
    assert off["mean_nodes_powered"] == pytest.approx(30)
    assert on["mean_nodes_powered"] < 30 and on["energy_kwh"] < off["energy_kwh"]
    assert on["acceptance_rate"] == off["acceptance_rate"] == 1.0
    with pytest.raises(ValueError, match="power_manager"):
        run_trace_comparison(trace, schedulers=["binpack"], seed=2, power_manager="sometimes")
    args = ["simulate", "--trace", "azure-vm", "--trace-dir", str(FIXTURE), "--quiet"]
    for flag, value, reason in (
        ("--load", "1.5", "size the fleet with --nodes"),
        ("--physics-seed", "3", "no contention physics"),
    ):
        assert main([*args, flag, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and flag in err and reason in err
