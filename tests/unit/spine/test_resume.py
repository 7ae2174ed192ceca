"""An agent that died resumes its restartable placements from its work dir, hub or no hub.

Real processes through :class:`ProcessRunner`; the agent's death is played by abandoning one
runner (its watcher cancelled, its process killed, as PR_SET_PDEATHSIG does) and starting a
second one on the same work dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.executor import ProcessRunner, RunningPlacement
from edge_agent.restarts import Backoff, RestartChoice

COUNTING = ["sh", "-c", 'echo run >> "$EDGEPLANE_PLACEMENT_ID.runs"; exec sleep 60']


class Recorder:
    def __init__(self) -> None:
        self.states: list[PlacementState] = []

    def __call__(self, state: PlacementState) -> None:
        self.states.append(PlacementState(**{f: getattr(state, f) for f in state.__slots__}))


def _runner(work: Path, recorder: Recorder, **kwargs) -> ProcessRunner:
    return ProcessRunner(
        work_dir=work,
        on_change=recorder,
        stop_grace_s=1,
        backoff=Backoff(0.01, 0.05),
        state_file=work / "placements.json",
        **kwargs,
    )


def _runs(work: Path, placement_id: str) -> int:
    # In the placement's own work dir (a bare runner keeps them in <work>/sandboxes), which a
    # resumed placement finds again.
    path = work / "sandboxes" / placement_id / f"{placement_id}.runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def _until(predicate, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("condition not reached")


async def _die(runner: ProcessRunner) -> None:
    """The agent dies: nobody watches any more, and the processes die with it."""
    for entry in runner.placements.values():
        if entry.task is not None:
            entry.task.cancel()
        if entry.process is not None and entry.process.returncode is None:
            os.killpg(entry.process.pid, signal.SIGKILL)
            await asyncio.wait_for(entry.process.wait(), 5)


def _stored(work: Path) -> list[str]:
    return [p["placement_id"] for p in json.loads((work / "placements.json").read_text())["placements"]]


async def test_a_restartable_placement_is_resumed_by_the_next_agent_and_counted_as_a_restart(tmp_path):
    first = _runner(tmp_path, Recorder())
    await first.start("p1", "w1", RunSpec(command=COUNTING, restart_policy="on-failure", cpu=0.5))
    await first.start("p2", "w2", RunSpec(command=COUNTING))  # restart_policy never: not resumed
    await _until(lambda: _runs(tmp_path, "p1") == 1 and _runs(tmp_path, "p2") == 1)
    assert _stored(tmp_path) == ["p1"]
    await _die(first)

    recorder = Recorder()
    second = _runner(tmp_path, recorder)
    resumed = await second.resume()
    assert [(s.placement_id, s.state, s.restarts) for s in resumed] == [("p1", "Running", 1)]
    assert resumed[0].message.startswith("resumed after the agent restarted")
    assert recorder.states[-1].state == "Running" and recorder.states[-1].exit_code is None
    await _until(lambda: _runs(tmp_path, "p1") == 2)
    assert _runs(tmp_path, "p2") == 1  # never restarted
    assert _stored(tmp_path) == ["p1"]
    # Stopped on request, it is gone from the file: a third agent resumes nothing.
    assert await second.stop("p1")
    assert _stored(tmp_path) == []
    assert await _runner(tmp_path, Recorder()).resume() == []


async def test_the_local_policy_may_decline_to_resume_and_max_restarts_still_counts(tmp_path):
    first = _runner(tmp_path, Recorder())
    await first.start("p1", "w1", RunSpec(command=COUNTING, restart_policy="always"))
    await first.start("p2", "w2", RunSpec(command=COUNTING, restart_policy="always", max_restarts=0))
    await _until(lambda: _runs(tmp_path, "p1") == 1 and _runs(tmp_path, "p2") == 1)
    await _die(first)

    def decline(entry: RunningPlacement) -> RestartChoice:
        return RestartChoice(False, 0.0, 0, "restart declined by local policy (on battery at 5%)")

    second = _runner(tmp_path, Recorder(), restart_advisor=decline)
    states = {s.placement_id: s for s in await second.resume()}
    assert states["p1"].state == "Failed"
    assert states["p1"].message.startswith("restart declined by local policy (on battery at 5%)")
    assert "not resumed" in states["p1"].message
    assert states["p2"].state == "Failed" and "max_restarts (0) reached" in states["p2"].message
    assert _runs(tmp_path, "p1") == 1 and _runs(tmp_path, "p2") == 1
    assert _stored(tmp_path) == []


async def test_the_advisors_quota_applies_to_the_resumed_process(tmp_path):
    first = _runner(tmp_path, Recorder())
    await first.start("p1", "w1", RunSpec(command=COUNTING, restart_policy="on-failure", memory=2**30))
    await _until(lambda: _runs(tmp_path, "p1") == 1)
    await _die(first)

    def smaller(entry: RunningPlacement) -> RestartChoice:
        return RestartChoice(True, 0.25, 2**29, "local policy bin 5")

    second = _runner(tmp_path, Recorder(), restart_advisor=smaller)
    (state,) = await second.resume()
    entry = second.placements["p1"]
    assert (state.state, entry.cpu, entry.memory) == ("Running", 0.25, 2**29)
    await _until(lambda: _runs(tmp_path, "p1") == 2)
    await second.stop_all()


async def test_a_corrupt_state_file_is_set_aside_and_nothing_is_resumed(tmp_path):
    (tmp_path / "placements.json").write_text("{not json")
    assert await _runner(tmp_path, Recorder()).resume() == []
    assert (tmp_path / "placements.json.corrupt").read_text() == "{not json"
    (tmp_path / "placements.json").write_text(
        json.dumps({"version": 1, "placements": [{"placement_id": "p9", "spec": {"command": 5}}]})
    )
    assert await _runner(tmp_path, Recorder()).resume() == []  # an unreadable entry is skipped


async def test_without_a_state_file_nothing_is_written_or_resumed(tmp_path):
    runner = ProcessRunner(work_dir=tmp_path, on_change=Recorder())
    await runner.start("p1", "w1", RunSpec(command=COUNTING, restart_policy="always"))
    assert not (tmp_path / "placements.json").exists()
    assert await runner.resume() == []
    await runner.stop_all()


async def test_starts_that_change_no_restartable_entry_leave_the_state_file_alone(tmp_path):
    runner = _runner(tmp_path, Recorder())
    await runner.start("keep", "w1", RunSpec(command=COUNTING, restart_policy="always"))
    state_file = tmp_path / "placements.json"
    written = state_file.stat()
    for n in range(3):  # not restartable: the file's entries do not change, nor does the file
        await runner.start(f"once-{n}", "w2", RunSpec(command=["true"]))
    await _until(lambda: all(runner.placements[f"once-{n}"].state.state == "Succeeded" for n in range(3)))
    after = state_file.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert _stored(tmp_path) == ["keep"]
    state_file.write_text("{not json")  # set aside by a read: the same entries are written again
    assert runner._placement_file.read() == []
    runner._persist()
    assert _stored(tmp_path) == ["keep"]
    await runner.stop_all()
