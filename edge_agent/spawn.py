"""Start a unit's process without holding the agent's event loop.

``asyncio.create_subprocess_exec`` runs ``subprocess.Popen`` on the loop's thread, and Popen
returns only once the child has exec'd: the fork of a large agent, the child's setup (joining
cgroups, which may wait a kernel RCU grace period of 10-15 ms; the uid drop; seccomp) and the
exec, 20-30 ms in all, during which the agent answered no bid, sent no report and read no command.
:func:`spawn` runs the same Popen in a worker thread (the loop goes on; the thread waits in
``read`` without the GIL) and watches the child's exit with a pidfd on the loop (Linux 5.3+), or
with a thread of its own where there is none, as asyncio's own child watchers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import threading
from typing import Any, Protocol

__all__ = ["ChildProcess", "PipedProcess", "ProcessHandle", "spawn"]


class ProcessHandle(Protocol):
    """What the agent needs of a started process (``asyncio.subprocess.Process`` is one)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class PipedProcess(ProcessHandle, Protocol):
    """A started process whose stdin and stdout are pipes to the agent (a function worker)."""

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...


class ChildProcess:
    """A child started by :func:`spawn`; ``returncode`` is None until it has exited and been reaped."""

    def __init__(self, popen: subprocess.Popen[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._popen = popen
        self._loop = loop
        self._exited: asyncio.Future[int] = loop.create_future()
        self._watch()

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        """Its exit code (negative: the signal that ended it), once it has exited."""
        return await asyncio.shield(self._exited)

    def _watch(self) -> None:
        try:
            fd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):  # no pidfd here: a thread waits, as ThreadedChildWatcher does
            threading.Thread(target=self._wait_in_thread, name=f"wait-{self.pid}", daemon=True).start()
            return
        self._loop.add_reader(fd, self._readable, fd)

    def _readable(self, fd: int) -> None:
        code = self._popen.poll()  # readable: it has exited; poll reaps it
        if code is None:
            return
        self._loop.remove_reader(fd)
        os.close(fd)
        self._settle(code)

    def _wait_in_thread(self) -> None:
        code = self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._settle, code)

    def _settle(self, code: int) -> None:
        if not self._exited.done():
            self._exited.set_result(code)


async def spawn(*command: str, **popen_kwargs: Any) -> ChildProcess:
    """``subprocess.Popen(command, **popen_kwargs)`` in a worker thread; its errors (OSError,
    SubprocessError, ValueError) are raised here as Popen raises them."""
    loop = asyncio.get_running_loop()
    starting = loop.run_in_executor(None, functools.partial(subprocess.Popen, list(command), **popen_kwargs))
    try:
        popen = await asyncio.shield(starting)
    except asyncio.CancelledError:
        # The thread starts it anyway: it must not run on untracked.
        starting.add_done_callback(_kill_untracked)
        raise
    return ChildProcess(popen, loop)


def _kill_untracked(starting: asyncio.Future[subprocess.Popen[Any]]) -> None:
    if starting.cancelled() or starting.exception() is not None:
        return
    popen = starting.result()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)  # its group (a unit starts a session of its own)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        popen.kill()
    threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True).start()
