"""The unit spawner (edge_agent/spawner.py): a small process of the agent's forks units' processes.

Real processes throughout: the spawner program itself, the units it starts, and the agent's
confinement around them. What it must keep from the direct path (the agent forking): exit codes
(signals negative), output to the unit's log, a clean environment and the unit's cwd, the same
errors for a program that cannot start, no process left untracked when a start is given up, and
when the spawner itself dies, its units die too and the agent forks the next ones itself."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.cgroups import NoCpuLimit
from edge_agent.child_process import ChildSetup
from edge_agent.confinement import Confinement
from edge_agent.executor import ProcessRunner
from edge_agent.spawner import UnitSpawner

BARE = ChildSetup(procs=(), memory_bytes=None, uid=None, gid=None, no_new_privs=True, seccomp=False)


@pytest.fixture
async def spawner() -> AsyncIterator[UnitSpawner]:
    started = await UnitSpawner.start(seccomp=False)
    try:
        yield started
    finally:
        await started.close()
    assert started.process.returncode == 0, "it exits when the agent closes it"


async def test_a_started_process_reports_its_exit_code_output_env_and_cwd(tmp_path, spawner):
    log = tmp_path / "out.log"
    with log.open("ab") as out:
        process = await spawner.spawn(
            ["sh", "-c", 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 3'],
            stdout=out.fileno(),
            cwd=str(tmp_path),
            env={"PATH": "/usr/bin:/bin", "GREETING": "hello"},
            setup=BARE,
        )
        assert process.pid != os.getpid() and process.pid != spawner.process.pid
        assert await asyncio.wait_for(process.wait(), 10) == 3
        assert process.returncode == 3
        killed = await spawner.spawn(["sleep", "30"], stdout=out.fileno(), cwd="/", env={}, setup=BARE)
        os.kill(killed.pid, signal.SIGTERM)
        assert await asyncio.wait_for(killed.wait(), 10) == -signal.SIGTERM
    assert log.read_text().splitlines() == [f"hello from {tmp_path}", "oops"]


async def test_an_environment_is_exactly_the_one_given(tmp_path, spawner):
    log = tmp_path / "env.log"
    with log.open("ab") as out:
        process = await spawner.spawn(
            ["/usr/bin/env"], stdout=out.fileno(), cwd="/", env={"ONLY": "this"}, setup=BARE
        )
        assert await asyncio.wait_for(process.wait(), 10) == 0
    assert log.read_text().splitlines() == ["ONLY=this"]


@pytest.mark.parametrize(
    ("argv", "cwd", "error"),
    [
        (["no-such-program-here"], "/", FileNotFoundError),
        (["true"], "/no/such/dir", FileNotFoundError),
        (["/"], "/", PermissionError),  # a directory
    ],
)
async def test_a_process_that_cannot_start_raises_as_popen_does(tmp_path, spawner, argv, cwd, error):
    with (tmp_path / "out.log").open("ab") as out:
        with pytest.raises(error):
            await spawner.spawn(argv, stdout=out.fileno(), cwd=cwd, env={"PATH": "/usr/bin:/bin"}, setup=BARE)
        # and it goes on serving
        process = await spawner.spawn(["true"], stdout=out.fileno(), cwd="/", env={}, setup=BARE)
        assert await asyncio.wait_for(process.wait(), 10) == 0


async def test_a_start_given_up_leaves_no_process_running(tmp_path):
    spawner = await UnitSpawner.start(seccomp=False)
    marker = tmp_path / "ran-on"
    try:
        with (tmp_path / "out.log").open("ab") as out:
            starting = asyncio.ensure_future(
                spawner.spawn(
                    ["sh", "-c", f"sleep 0.5; touch {marker}"],
                    stdout=out.fileno(),
                    cwd="/",
                    env={},
                    setup=BARE,
                )
            )
            await asyncio.sleep(0)  # the start is on its way
            starting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await starting
            await asyncio.sleep(1.0)
    finally:
        await spawner.close()
    assert not marker.exists(), "the process whose start was given up kept running"


async def test_when_the_spawner_dies_its_units_die_and_the_agent_forks_the_next_itself(tmp_path):
    confinement = Confinement.unconfined(tmp_path / "agent")
    await confinement.start_spawner()
    spawner = confinement.spawner
    assert spawner is not None and spawner.alive
    runner = ProcessRunner(
        work_dir=tmp_path / "agent",
        on_change=lambda s: None,
        cpu_limiter=NoCpuLimit(),
        confinement=confinement,
    )
    try:
        await runner.start("long-p", "long-w", RunSpec(command=["sleep", "60"], cpu=0.1))
        long_pid = runner.placements["long-p"].process.pid  # type: ignore[union-attr]
        os.kill(spawner.process.pid, signal.SIGKILL)
        state = await _ended(runner, "long-p")
        assert state.state == "Failed" and state.exit_code == 128 + signal.SIGKILL, state  # as a shell says
        assert _gone(long_pid), "the unit outlived its spawner"
        assert not spawner.alive
        # The next unit starts all the same (forked by the agent, or by a spawner started again).
        await runner.start("next-p", "next-w", RunSpec(command=["sh", "-c", "exit 0"], cpu=0.1))
        assert (await _ended(runner, "next-p")).state == "Succeeded"
    finally:
        await runner.stop_all()
        await confinement.stop_spawner()
        confinement.shutdown()


async def test_the_spawner_dies_with_the_agent(tmp_path):
    """A process that started a spawner and was killed: the spawner is gone too (PR_SET_PDEATHSIG)."""
    script = (
        "import asyncio, sys\n"
        "from edge_agent.spawner import UnitSpawner\n"
        "async def main():\n"
        "    s = await UnitSpawner.start(seccomp=False)\n"
        "    print(s.process.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    agent = subprocess.Popen(
        ["python", "-c", script], stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[3], text=True
    )
    try:
        assert agent.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(agent.stdout.readline), 30)
        spawner_pid = int(line)
        assert not _gone(spawner_pid)
    finally:
        agent.kill()
        agent.wait(10)
    for _ in range(200):  # 10 s
        if _gone(spawner_pid):
            break
        await asyncio.sleep(0.05)
    assert _gone(spawner_pid), "the spawner outlived the agent"


async def _ended(runner: ProcessRunner, placement_id: str, timeout_s: float = 15.0) -> PlacementState:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = runner.placements[placement_id].state
        if state.state not in ("Running", "Pending"):
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"placement {placement_id} still running after {timeout_s} s")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")


@pytest.mark.parametrize("forker", ["agent", "spawner"])
async def test_a_piped_unit_talks_through_its_stdin_and_stdout(tmp_path, forker):
    """What a function worker gets: its stdin and stdout are pipes to the agent, stderr its log."""
    confinement = Confinement.unconfined(tmp_path / "agent")
    if forker == "spawner":
        await confinement.start_spawner()
        assert confinement.spawner is not None
    sandbox = confinement.open("piped")
    try:
        with (tmp_path / "err.log").open("ab") as err:
            process = await confinement.launch_piped(
                ["sh", "-c", 'while read line; do echo "got $line"; done; echo bye >&2'],
                sandbox=sandbox,
                stderr=err,
                env={"PATH": "/usr/bin:/bin"},
                limit=2**16,
            )
        assert process.stdin is not None and process.stdout is not None
        for word in ("one", "two"):
            process.stdin.write(f"{word}\n".encode())
            await process.stdin.drain()
            assert await asyncio.wait_for(process.stdout.readline(), 10) == f"got {word}\n".encode()
        process.stdin.close()
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b""  # its end
        assert await asyncio.wait_for(process.wait(), 10) == 0
        assert (tmp_path / "err.log").read_text() == "bye\n"
    finally:
        confinement.close(sandbox)
        await confinement.stop_spawner()
        confinement.shutdown()


# The shell's own view of itself: ignored signals, open fds, session id and pid, cwd.
PROBE = (
    "grep ^SigIgn /proc/$$/status | cut -f2; ls /proc/$$/fd | tr '\\n' ' '; echo; "
    "cut -d' ' -f6 /proc/$$/stat; echo $$; pwd"
)


async def _probe(spawner: UnitSpawner, tmp_path: Path, env: dict[str, str]) -> tuple[str, bool]:
    log = tmp_path / "probe.log"
    log.unlink(missing_ok=True)
    with log.open("ab") as out:
        process = await spawner.spawn(
            ["sh", "-c", PROBE], stdout=out.fileno(), cwd=str(tmp_path), env=env, setup=BARE
        )
        assert await asyncio.wait_for(process.wait(), 10) == 0
    return log.read_text().strip(), process.forked_ahead


async def test_units_are_forked_ahead_and_start_as_a_popen_child_would(tmp_path, spawner):
    """The next unit is forked ahead of its start (edge_agent/spawner_process.py, a zygote): what
    it becomes is what a Popen child is (only stdio open, its own session, no ignored signal,
    the cwd), and so is a start too large for the zygote (a Popen, as before)."""
    env = {"PATH": "/usr/bin:/bin"}
    ahead, was_ahead = await _probe(spawner, tmp_path, env)
    assert was_ahead
    ignored, fds, session, pid, cwd = ahead.splitlines()
    assert (ignored, fds.split(), session, cwd) == ("0000000000000000", ["0", "1", "2"], pid, str(tmp_path))
    popen, was_ahead = await _probe(spawner, tmp_path, {**env, "BIG": "x" * 100_000})
    assert not was_ahead
    assert popen.splitlines()[:2] == ahead.splitlines()[:2] and popen.splitlines()[4] == cwd
    # A start that fails in the zygote (no such program) fails as Popen's does; the next is ahead.
    with (tmp_path / "out.log").open("ab") as out:
        with pytest.raises(FileNotFoundError):
            await spawner.spawn(["no-such-program-here"], stdout=out.fileno(), cwd="/", env=env, setup=BARE)
        codes = []
        for code in (0, 3, 7):
            process = await spawner.spawn(
                ["sh", "-c", f"exit {code}"], stdout=out.fileno(), cwd="/", env=env, setup=BARE
            )
            assert process.forked_ahead
            codes.append(await asyncio.wait_for(process.wait(), 10))
    assert codes == [0, 3, 7]
