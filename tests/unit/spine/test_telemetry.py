"""The real telemetry readers, pointed at fixture trees where the hardware is absent."""

from __future__ import annotations

from pathlib import Path

from edgeplane_contract.messages import GpuTelemetry

from edge_agent.telemetry import NvmlGpuReader, PowerState, PsutilSystemReader, SysfsPowerReader
from edge_agent.telemetry.node_power import NodePower, RaplReader


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


# --- the node's draw (edge_agent/telemetry/node_power.py) -------------------------------------


def test_on_battery_the_draw_is_the_batterys_reading(tmp_path):
    _supply(tmp_path, "AC", type="Mains", online="0")
    _supply(tmp_path, "BAT0", type="Battery", capacity="60", status="Discharging", power_now="7250000")
    _supply(tmp_path, "BAT1", type="Battery", capacity="60", current_now="500000", voltage_now="12000000")
    state = SysfsPowerReader(tmp_path).read()
    assert state.power_w == 7.25 + 6.0
    assert NodePower("edge").read(state, 50.0, []) == (13.25, "battery")
    (tmp_path / "AC" / "online").write_text("1\n")  # plugged in: the battery's draw is not the node's
    assert SysfsPowerReader(tmp_path).read().power_w is None


def _rapl(root: Path, zone: str, energy_uj: int, wrap_uj: int = 262143328850) -> None:
    folder = root / zone
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{wrap_uj}\n")


def test_rapl_counters_give_the_packages_watts_across_a_wrap(tmp_path):
    now = [100.0]
    _rapl(tmp_path, "intel-rapl:0", 1_000_000, wrap_uj=10_000_000)
    _rapl(tmp_path, "intel-rapl:1", 5_000_000)
    _rapl(tmp_path, "intel-rapl:0:0", 999_999_999)  # a sub-zone (the cores): part of its package
    reader = RaplReader(tmp_path, clock=lambda: now[0])
    assert reader.available and reader.watts() is None  # one reading: no interval yet
    now[0] = 102.0
    _rapl(tmp_path, "intel-rapl:0", 500_000, wrap_uj=10_000_000)  # wrapped: 9.5 J
    _rapl(tmp_path, "intel-rapl:1", 135_000_000)  # 130 J
    assert reader.watts() == (9.5 + 130.0) / 2.0
    gpu = GpuTelemetry(index=0, name="A100", power_w=60.0)
    power = NodePower("gpu", reader)
    now[0] = 103.0
    _rapl(tmp_path, "intel-rapl:1", 235_000_000)  # 100 J in 1 s, package 0 idle
    assert power.read(PowerState(source="mains"), 10.0, [gpu]) == (160.0, "rapl")


def test_unreadable_counters_fall_back_to_the_power_model(tmp_path):
    _rapl(tmp_path, "intel-rapl:0", 1)
    reader = RaplReader(tmp_path)
    (tmp_path / "intel-rapl:0" / "energy_uj").unlink()  # as root-only counters read to a non-root agent
    power = NodePower("edge", reader)
    watts, method = power.read(PowerState(source="mains"), 50.0, [])
    assert method == "model" and watts == 6.0 + (30.0 - 6.0) * 0.5 and not reader.available
    assert RaplReader(tmp_path / "absent").available is False


def test_the_model_counts_gpus_by_their_reading_or_their_utilisation():
    power = NodePower("gpu")
    measured = [GpuTelemetry(index=i, name="A100", power_w=100.0) for i in range(2)]
    assert power.read(PowerState(source="mains"), 0.0, measured) == (180.0 + 200.0, "model")
    busy = [GpuTelemetry(index=0, name="A100", utilization_percent=50.0)]
    assert power.read(PowerState(source="mains"), 100.0, busy) == (450.0 + 50.0 + 175.0, "model")
