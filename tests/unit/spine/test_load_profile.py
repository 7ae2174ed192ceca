"""The agent's load profile of running placements: seconds per CPU-load bin, final run only."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

import pytest

from edgeplane_contract.messages import PlacementState, RunSpec, RuntimeObservation

from edge_agent.executor import ProcessRunner
from edge_agent.load_profile import LoadSampler
from edge_agent.restarts import Backoff
from edge_agent.telemetry.system import ProcPressureReader, PsutilBusyReader


class ScriptedBusy:
    """A busy reader that returns the fractions it is given, in order (None first: the baseline)."""

    def __init__(self, *fractions: float | None) -> None:
        self.fractions = list(fractions)
        self.calls = 0

    def busy_fraction(self) -> float | None:
        self.calls += 1
        return self.fractions.pop(0) if self.fractions else None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sampler(*fractions: float | None) -> tuple[LoadSampler, Clock]:
    clock = Clock()
    return LoadSampler(ScriptedBusy(*fractions), clock=clock), clock


def test_each_interval_goes_to_the_bin_of_its_busy_fraction():
    sampler, clock = _sampler(None, 0.05, 0.95, 0.55)
    sampler.begin("p")
    for _ in range(3):
        clock.now += 1.0
        sampler.sample()
    observation = sampler.finish("p")
    assert observation is not None
    assert observation.runtime_s == pytest.approx(3.0)
    assert observation.load_seconds == pytest.approx([1.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 1.0])
    assert len(observation.load_seconds) == RuntimeObservation.BINS


def test_a_placement_that_starts_mid_interval_counts_only_its_part():
    sampler, clock = _sampler(None, 0.3, 0.3)
    sampler.begin("a")
    clock.now += 0.6
    sampler.begin("b")
    clock.now += 0.4
    sampler.sample()
    clock.now += 1.0
    sampler.sample()
    b = sampler.finish("b")
    assert b is not None and sum(b.load_seconds) == pytest.approx(1.4)
    assert b.load_seconds[3] == pytest.approx(1.4)


def test_a_finish_just_after_a_reading_puts_the_rest_in_the_last_bin():
    sampler, clock = _sampler(None, 0.72)
    sampler.begin("p")
    clock.now += 1.0
    sampler.sample()
    clock.now += 0.05  # too short for a reading of its own
    observation = sampler.finish("p")
    assert observation is not None
    assert observation.load_seconds[7] == pytest.approx(1.05)
    assert observation.runtime_s == pytest.approx(1.05)


def test_a_restart_starts_a_new_run_and_only_the_final_one_is_reported():
    sampler, clock = _sampler(None, 0.95, 0.15)
    sampler.begin("p")
    clock.now += 5.0
    sampler.sample()  # 5 s at 95 % in the first (failed) run
    sampler.begin("p")  # the restart
    clock.now += 2.0
    observation = sampler.finish("p")
    assert observation is not None
    assert observation.runtime_s == pytest.approx(2.0)
    assert observation.load_seconds[9] == 0.0 and observation.load_seconds[1] == pytest.approx(2.0)


def test_a_zero_length_run_gives_no_observation():
    sampler, _ = _sampler(None, 0.5)
    sampler.begin("p")
    assert sampler.finish("p") is None
    assert "p" not in sampler


def test_a_run_this_agent_did_not_see_start_gives_no_observation():
    """After an agent restart the sampler has no run for the placement: nothing rather than a part."""
    sampler, clock = _sampler(None, 0.5)
    clock.now += 3.0
    assert sampler.finish("resumed-elsewhere") is None


def test_a_dropped_run_is_forgotten():
    sampler, clock = _sampler(None, 0.5)
    sampler.begin("p")
    clock.now += 1.0
    sampler.drop("p")
    assert "p" not in sampler and sampler.finish("p") is None


def test_no_reading_at_all_gives_no_observation_rather_than_an_empty_one():
    sampler, clock = _sampler(None, None, None)
    sampler.begin("p")
    clock.now += 2.0
    sampler.sample()
    assert sampler.finish("p") is None


def test_a_failing_reader_is_counted_and_sampling_goes_on():
    class Broken:
        def busy_fraction(self) -> float | None:
            raise OSError("no /proc")

    clock = Clock()
    sampler = LoadSampler(Broken(), clock=clock)
    sampler.begin("p")
    clock.now += 1.0
    sampler.sample()
    assert sampler.errors == 2
    assert sampler.finish("p") is None


def test_pressure_is_averaged_over_the_runs_readings(tmp_path):
    psi = tmp_path / "cpu"
    psi.write_text(
        "some avg10=20.00 avg60=5.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    clock = Clock()
    sampler = LoadSampler(ScriptedBusy(None, 0.5, 0.5), pressure=ProcPressureReader(psi), clock=clock)
    sampler.begin("p")
    clock.now += 1.0
    sampler.sample()
    psi.write_text("some avg10=40.00 avg60=5.00 avg300=1.00 total=1\n")
    clock.now += 1.0
    sampler.sample()
    observation = sampler.finish("p")
    assert observation is not None and observation.cpu_pressure == pytest.approx(0.3)


def test_the_pressure_reader_says_none_without_psi_or_with_garbage(tmp_path):
    assert ProcPressureReader(tmp_path / "missing").some_avg10() is None
    (tmp_path / "cpu").write_text("some avg10=abc\n")
    assert ProcPressureReader(tmp_path / "cpu").some_avg10() is None


def test_the_real_busy_reader_reads_this_machine():
    reader = PsutilBusyReader()
    assert reader.busy_fraction() is None  # the baseline
    sum(i * i for i in range(200_000))  # some CPU time, so that the counters move
    fraction = reader.busy_fraction()
    assert fraction is None or 0.0 <= fraction <= 1.0


async def test_the_loop_samples_only_while_something_runs():
    busy = ScriptedBusy(*([0.5] * 100))
    sampler = LoadSampler(busy, interval_s=0.01)
    task = asyncio.create_task(sampler.loop())
    await asyncio.sleep(0.05)
    assert busy.calls == 0  # idle: no reading at all
    sampler.begin("p")
    await asyncio.sleep(0.1)
    assert busy.calls >= 3
    observation = sampler.finish("p")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert observation is not None and observation.load_seconds[5] > 0


# --- in the runner, with real processes --------------------------------------------------------


async def _states(tmp_path: Path, command: list[str], policy: str) -> list[PlacementState]:
    states: list[PlacementState] = []
    load = LoadSampler(PsutilBusyReader(), interval_s=0.1)
    runner = ProcessRunner(
        work_dir=tmp_path,
        on_change=lambda s: states.append(dataclasses.replace(s)),
        backoff=Backoff(0.01, 0.05),
        load=load,
    )
    sampling = asyncio.create_task(load.loop())
    try:
        await runner.start("p1", "w1", RunSpec(command=command, restart_policy=policy))
        task = runner.placements["p1"].task
        assert task is not None
        await asyncio.wait_for(task, 10)
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    assert "p1" not in load
    return states


async def test_the_runner_reports_the_final_runs_load_on_success_only(tmp_path):
    # The first run sleeps 1 s and fails; the restart sleeps 0.2 s and succeeds.
    runs = tmp_path / "runs"
    count = f"n=$(( $(cat {runs} 2>/dev/null || echo 0) + 1 )); echo $n > {runs}"
    script = f"{count}; [ $n -gt 1 ] && sleep 0.2 && exit 0; sleep 1; exit 1"
    states = await _states(tmp_path / "ok", ["sh", "-c", script], "on-failure")
    assert [(s.state, s.observation is None) for s in states] == [
        ("Running", True),
        ("Running", True),
        ("Succeeded", False),
    ]
    observation = states[-1].observation
    assert observation is not None and observation.invalid() is None
    assert 0.2 <= observation.runtime_s < 0.9  # the final run only, not the failed one
    assert sum(observation.load_seconds) == pytest.approx(observation.runtime_s, abs=0.05)

    failed = await _states(tmp_path / "bad", ["sh", "-c", "sleep 0.2; exit 3"], "never")
    assert failed[-1].state == "Failed" and failed[-1].observation is None
