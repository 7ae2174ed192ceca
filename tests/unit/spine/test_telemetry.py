"""The real telemetry readers, pointed at fixture trees where the hardware is absent."""

from __future__ import annotations

from pathlib import Path

from edge_agent.telemetry import NvmlGpuReader, PsutilSystemReader, SysfsPowerReader


def _supply(root: Path, name: str, **files: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for key, value in files.items():
        (folder / key).write_text(value + "\n")


def test_a_laptop_on_ac_is_on_mains_with_its_battery_level(tmp_path):
    _supply(tmp_path, "AC", type="Mains", online="1")
    _supply(tmp_path, "BAT0", type="Battery", present="1", capacity="57", status="Charging")
    state = SysfsPowerReader(tmp_path).read()
    assert (state.source, state.battery_percent, state.battery_status) == ("mains", 57.0, "Charging")


def test_unplugged_it_runs_on_battery(tmp_path):
    _supply(tmp_path, "ADP1", type="Mains", online="0")
    _supply(tmp_path, "BAT0", type="Battery", present="1", capacity="23", status="Discharging")
    state = SysfsPowerReader(tmp_path).read()
    assert (state.source, state.battery_percent) == ("battery", 23.0)


def test_a_usb_powered_board_with_a_battery_hat_counts_usb_as_external_power(tmp_path):
    _supply(tmp_path, "usb", type="USB", online="1")
    _supply(tmp_path, "bat", type="Battery", capacity="90", status="Full")
    assert SysfsPowerReader(tmp_path).read().source == "mains"


def test_two_batteries_report_their_mean_level_and_absent_ones_are_ignored(tmp_path):
    _supply(tmp_path, "BAT0", type="Battery", capacity="40", status="Discharging")
    _supply(tmp_path, "BAT1", type="Battery", capacity="60", status="Discharging")
    _supply(tmp_path, "BAT2", type="Battery", present="0", capacity="0")
    assert SysfsPowerReader(tmp_path).read().battery_percent == 50.0


def test_a_server_without_power_supply_entries_is_on_mains(tmp_path):
    assert SysfsPowerReader(tmp_path / "missing").read().source == "mains"
    assert SysfsPowerReader(tmp_path).read().source == "mains"


def test_garbage_capacity_does_not_crash_the_reader(tmp_path):
    _supply(tmp_path, "BAT0", type="Battery", capacity="n/a", status="Discharging")
    state = SysfsPowerReader(tmp_path).read()
    assert (state.source, state.battery_percent) == ("battery", None)


def test_the_real_power_reader_reads_this_machine():
    assert SysfsPowerReader().read().source in ("mains", "battery")


def test_the_system_reader_sees_this_machine():
    sample = PsutilSystemReader().read()
    assert sample.cpu_count >= 1 and sample.memory_total_bytes > sample.memory_used_bytes > 0


def test_without_an_nvidia_driver_the_gpu_reader_reports_no_gpus():
    reader = NvmlGpuReader()
    gpus = reader.read()
    if reader.available:  # a GPU machine: every device is reported with its memory
        assert gpus and all(g.memory_total_bytes > 0 for g in gpus)
    else:
        assert gpus == [] and reader.error
    reader.close()
