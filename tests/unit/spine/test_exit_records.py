"""Exit records (edge_agent/exit_records.py): the unit spawner writes down a unit's end before the
agent hears of it, so an agent killed in between still reports the end instead of losing it (the
hub would run the workload again).

Real processes: the spawner program, the units it starts, :class:`ProcessRunner`. The functional
version (a real agent frozen while its unit ends, then killed) is in
``tests/functional/test_resume.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from pathlib import Path

from edgeplane_contract.messages import RunSpec

from edge_agent.confinement import Confinement
from edge_agent.executor import ProcessRunner
from edge_agent.exit_records import ExitRecords
from edge_agent.spawner import UnitSpawner
from edge_agent.spawner_process import write_exit_record

from .test_resume import Recorder
from .test_resume import _runner as _resume_runner
from .test_unit_spawner import BARE


def _runner(work: Path, recorder: Recorder, confinement: Confinement | None = None) -> ProcessRunner:
    """test_resume's runner, keeping exit records in ``work/exits``."""
    return _resume_runner(work, recorder, confinement=confinement, exit_records=ExitRecords(work / "exits"))


async def test_the_spawner_writes_the_exit_before_the_agent_hears_of_it(tmp_path):
    records = ExitRecords(tmp_path / "exits")
    spawner = await UnitSpawner.start(seccomp=False)
    try:
        with (tmp_path / "out.log").open("ab") as out:
            ended = await spawner.spawn(
                ["sh", "-c", "exit 3"],
                stdout=out.fileno(),
                cwd="/",
                env={},
                setup=BARE,
                exit_record=records.request("p-3", "w-3", 2, 100.0),
            )
            # The record is written before the "exited" frame: once the agent knows, it exists.
            assert await asyncio.wait_for(ended.wait(), 10) == 3
            raw = json.loads(records.path_for("p-3").read_text())
            assert {k: raw[k] for k in ("placement_id", "workload_id", "restarts", "started_at", "code")} == {
                "placement_id": "p-3",
                "workload_id": "w-3",
                "restarts": 2,
                "started_at": 100.0,
                "code": 3,
            }
            assert records.path_for("p-3").stat().st_mode & 0o777 == 0o600
            killed = await spawner.spawn(
                ["sleep", "30"],
                stdout=out.fileno(),
                cwd="/",
                env={},
                setup=BARE,
                exit_record=records.request("p-term", "w", 0, None),
            )
            os.kill(killed.pid, signal.SIGTERM)
            assert await asyncio.wait_for(killed.wait(), 10) == -signal.SIGTERM
        [three, term] = records.read()  # sorted by file name
        assert (term.placement_id, term.code, term.exit_code) == ("p-term", -15, 143)
        assert (three.placement_id, three.exit_code, three.started_at) == ("p-3", 3, 100.0)
        assert not list(records.directory.glob("*.tmp"))
    finally:
        await spawner.close()


async def test_an_exit_the_agent_handles_leaves_no_record(tmp_path):
    confinement = Confinement.unconfined(tmp_path)
    await confinement.start_spawner()
    assert confinement.spawner is not None
    try:
        recorder = Recorder()
        runner = _runner(tmp_path, recorder, confinement)
        await runner.start("p-ok", "w", RunSpec(command=["true"]))
        # Restarted once locally, then failed for good: each run's record goes when it is handled.
        await runner.start(
            "p-fail", "w", RunSpec(command=["false"], restart_policy="on-failure", max_restarts=1)
        )
        for _ in range(500):
            if {s.placement_id for s in recorder.states if s.state in ("Succeeded", "Failed")} == {
                "p-ok",
                "p-fail",
            }:
                break
            await asyncio.sleep(0.02)
        final = {s.placement_id: s for s in recorder.states if s.state in ("Succeeded", "Failed")}
        assert final["p-ok"].state == "Succeeded" and final["p-fail"].restarts == 1
        assert list((tmp_path / "exits").iterdir()) == []
    finally:
        await confinement.stop_spawner()
        confinement.shutdown()


def _save(work: Path, placement_id: str, spec: RunSpec, restarts: int = 0) -> dict[str, object]:
    return {
        "placement_id": placement_id,
        "workload_id": f"w-{placement_id}",
        "restarts": restarts,
        "started_at": 50.0,
        "spec": dataclasses.asdict(spec),
    }


async def test_recorded_exits_become_final_states_at_the_next_start(tmp_path):
    """What a restarted agent finds: records of units that ended while nobody heard it."""
    records = ExitRecords(tmp_path / "exits")
    on_failure = RunSpec(command=["x"], restart_policy="on-failure", max_restarts=3)
    (tmp_path / "placements.json").write_text(
        json.dumps(
            {
                "version": 1,
                "placements": [
                    _save(tmp_path, "p-again", on_failure),
                    _save(tmp_path, "p-done", on_failure, restarts=1),
                    _save(tmp_path, "p-spent", on_failure, restarts=3),
                    _save(tmp_path, "p-alive", on_failure),
                ],
            }
        )
    )
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "p-bad.log").write_text("starting\nboom: no such table\n")
    for placement_id, code, restarts in [
        ("p-ok", 0, 0),  # restart_policy never (not in the file): ended for good
        ("p-bad", 2, 0),
        ("p-again", 1, 0),  # on-failure, under its limit: resumed, as after any exit
        ("p-done", 0, 1),  # on-failure and a success: ended
        ("p-spent", 1, 3),  # on-failure at max_restarts: ended
        ("p-reported", 0, 0),  # its final state already in the outbox
    ]:
        write_exit_record(records.request(placement_id, f"w-{placement_id}", restarts, 40.0), code)
    (records.directory / "junk.json").write_text("{not json")
    (records.directory / "p-half.json.tmp").write_text("{")

    recorder = Recorder()
    runner = _runner(tmp_path, recorder)
    ended = runner.recover_exits(reported={"p-reported"})

    assert ended == recorder.states  # handed to on_change: the outbox, then the registration
    by_id = {s.placement_id: s for s in ended}
    assert sorted(by_id) == ["p-bad", "p-done", "p-ok", "p-spent"]
    ok = by_id["p-ok"]
    assert (ok.state, ok.exit_code, ok.workload_id, ok.started_at) == ("Succeeded", 0, "w-p-ok", 40.0)
    assert ok.finished_at is not None and ok.finished_at >= 40.0
    assert "while the agent was down" in ok.message
    bad = by_id["p-bad"]
    assert (bad.state, bad.exit_code) == ("Failed", 2)
    assert bad.message.startswith("exit code 2: boom: no such table;")
    assert by_id["p-done"].state == "Succeeded" and by_id["p-done"].restarts == 1
    assert by_id["p-spent"].state == "Failed" and "max_restarts (3) reached" in by_id["p-spent"].message
    # Left to resume: the one whose exit asks for a restart, and the one with no record.
    assert sorted(s.placement_id for s in runner.resumable()) == ["p-again", "p-alive"]
    stored = json.loads((tmp_path / "placements.json").read_text())["placements"]
    assert sorted(p["placement_id"] for p in stored) == ["p-again", "p-alive"]
    assert list(records.directory.iterdir()) == []  # every record handled, the junk dropped
    assert runner.recover_exits() == []  # and nothing is reported twice


async def test_without_records_a_start_recovers_nothing(tmp_path):
    runner = ProcessRunner(work_dir=tmp_path, on_change=Recorder())
    assert runner.recover_exits() == []
    assert not (tmp_path / "exits").exists()


def test_an_odd_placement_id_gets_a_safe_file_name(tmp_path):
    records = ExitRecords(tmp_path / "exits")
    assert records.path_for("abc-123").name == "abc-123.json"
    odd = records.path_for("../../etc/passwd")
    assert odd.parent == records.directory and len(odd.stem) == 64


def test_records_live_in_memory_where_that_is_safe_else_in_the_work_dir(tmp_path):
    memory = tmp_path / "shm"
    memory.mkdir()
    work = tmp_path / "agent"
    chosen = ExitRecords.for_work_dir(work, memory_root=memory)
    assert chosen.directory.parent == memory and chosen.directory.stat().st_mode & 0o777 == 0o700
    assert ExitRecords.for_work_dir(work, memory_root=memory).directory == chosen.directory  # stable
    assert ExitRecords.for_work_dir(tmp_path / "other", memory_root=memory).directory != chosen.directory
    chosen.close()
    assert not chosen.directory.exists()  # empty at a clean stop: gone
    # Somebody else's name in the shared place (a symlink, a loose mode): not used.
    trap = ExitRecords.for_work_dir(work, memory_root=memory).directory
    trap.rmdir()
    trap.symlink_to(tmp_path)
    assert ExitRecords.for_work_dir(work, memory_root=memory).directory == work / "exits"
    trap.unlink()
    trap.mkdir(mode=0o777)
    trap.chmod(0o777)
    assert ExitRecords.for_work_dir(work, memory_root=memory).directory == work / "exits"
    assert ExitRecords.for_work_dir(work, memory_root=tmp_path / "none").directory == work / "exits"
