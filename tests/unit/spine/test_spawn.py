"""The agent starts a unit's process off its event loop (``edge_agent/spawn.py``): the loop keeps
turning while the child is set up, exit codes come back as asyncio's would, and a start whose
caller was cancelled does not leave a process running untracked."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from edge_agent.spawn import spawn


def _slow_setup() -> None:
    time.sleep(0.2)  # in the child, before the exec: what joining cgroups and the rest cost


async def test_the_loop_keeps_turning_while_a_slow_child_is_set_up():
    turns = 0
    stop = asyncio.Event()

    async def tick() -> None:
        nonlocal turns
        while not stop.is_set():
            await asyncio.sleep(0.005)
            turns += 1

    ticker = asyncio.create_task(tick())
    began = time.monotonic()
    child = await spawn("true", preexec_fn=_slow_setup, stdin=subprocess.DEVNULL)
    took = time.monotonic() - began
    stop.set()
    await ticker
    assert took >= 0.2
    assert turns >= 10  # about 40 at 5 ms; on the loop's thread it would be 0 or 1
    assert await asyncio.wait_for(child.wait(), 5) == 0
    assert child.returncode == 0


async def test_exit_codes_and_signals_come_back_as_asyncio_reports_them():
    child = await spawn(sys.executable, "-c", "import sys; sys.exit(3)")
    assert await asyncio.wait_for(child.wait(), 10) == 3
    sleeper = await spawn("sleep", "30", start_new_session=True)
    assert sleeper.returncode is None
    os.killpg(sleeper.pid, 9)
    assert await asyncio.wait_for(sleeper.wait(), 5) == -9
    assert await sleeper.wait() == -9  # waiting again answers at once


async def test_without_pidfd_a_thread_waits(monkeypatch):
    monkeypatch.delattr(os, "pidfd_open")
    child = await spawn("sh", "-c", "exit 7")
    assert await asyncio.wait_for(child.wait(), 5) == 7


async def test_a_start_whose_caller_was_cancelled_is_killed_not_left_running(tmp_path):
    marker = tmp_path / "ran"
    task = asyncio.create_task(
        spawn("sh", "-c", f"sleep 1; touch {marker}", preexec_fn=_slow_setup, start_new_session=True)
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(1.6)
    assert not marker.exists()


async def test_a_command_that_cannot_start_raises_as_popen_does():
    with pytest.raises(FileNotFoundError):
        await spawn("/nonexistent/edgeplane-command")
