"""The agent's side of the unit spawner (:mod:`edge_agent.spawner_process`): units' processes
forked by a small process of the agent's instead of the agent itself.

:meth:`UnitSpawner.start` runs the spawner program with the agent's interpreter and ``sys.path``
(``-I``: nothing from the environment) and waits for its ``ready``; :meth:`UnitSpawner.spawn`
sends one start and returns a :class:`SpawnedProcess` once the unit's process exec'd (or raises
what ``Popen`` raised there: ``OSError`` with its errno, else ``SubprocessError``). Exit codes
come back from the spawner, which reaps its children. If the spawner dies (it should not), the
units it started die with it (``PR_SET_PDEATHSIG``): their handles end with ``-SIGKILL`` once the
processes are gone, and the agent forks new units itself (:attr:`alive` is False).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from edge_agent.child_process import ChildSetup
from edge_agent.spawner_process import FrameReader, encode_frame

__all__ = ["SpawnedProcess", "UnitSpawner"]

log = logging.getLogger("edgeplane.agent.spawner")

READY_TIMEOUT_S = 20.0  # the spawner's interpreter start and imports (seconds on a loaded machine)
START_TIMEOUT_S = 60.0  # one start: the fork, the child's setup and the exec
_BOOT = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
    "from edge_agent.spawner_process import main; sys.exit(main(sys.argv[2:]))"
)


class SpawnedProcess:
    """A unit's process started by the spawner (an :class:`edge_agent.spawn.ProcessHandle`)."""

    def __init__(self, pid: int, loop: asyncio.AbstractEventLoop) -> None:
        self._pid = pid
        self._exited: asyncio.Future[int] = loop.create_future()
        # The agent's ends of its pipes, where it was started with them (Confinement.launch_piped).
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        # Started by a process the spawner forked ahead of the start (spawner_process.py), not
        # forked on the start: for tests and benchmarks.
        self.forked_ahead = False

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def settle(self, code: int) -> None:
        if not self._exited.done():
            self._exited.set_result(code)
        if self.stdin is not None:
            self.stdin.close()  # the reader side ends by itself, at the pipe's end


class UnitSpawner:
    """One spawner process and the agent's end of its socket."""

    def __init__(
        self, process: subprocess.Popen[bytes], sock: socket.socket, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.process = process
        self.sock = sock
        self.loop = loop
        self.alive = True
        self._reader = FrameReader()
        self._ids = itertools.count(1)
        self._starting: dict[int, asyncio.Future[SpawnedProcess]] = {}
        self._running: dict[int, SpawnedProcess] = {}
        self._send_lock = asyncio.Lock()
        self._ready: asyncio.Future[int] = loop.create_future()
        loop.add_reader(sock.fileno(), self._readable)

    @classmethod
    async def start(cls, *, seccomp: bool) -> UnitSpawner:
        """Start the spawner and wait for it (raises OSError or TimeoutError where it cannot)."""
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.to_thread(
                subprocess.Popen,
                [
                    sys.executable,
                    "-I",
                    "-c",
                    _BOOT,
                    json.dumps([p for p in sys.path if p]),
                    str(theirs.fileno()),
                    str(os.getpid()),
                    "1" if seccomp else "0",
                ],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                start_new_session=True,  # a terminal's Ctrl-C is the agent's to handle, not its
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        spawner = cls(process, ours, loop)
        try:
            await asyncio.wait_for(asyncio.shield(spawner._ready), READY_TIMEOUT_S)
        except BaseException:
            await spawner.close()
            raise
        return spawner

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        stdout: int,
        cwd: str,
        env: Mapping[str, str],
        setup: ChildSetup,
        stdin: int | None = None,
        stderr: int | None = None,
        exit_record: Mapping[str, Any] | None = None,
    ) -> SpawnedProcess:
        """Start one unit's process: its stdin from the fd ``stdin`` (None: /dev/null), its stdout
        to ``stdout``, its stderr to ``stderr`` (None: with stdout). The fds stay the caller's.
        ``exit_record`` (``{"path", "fields"}``): written by the spawner when the process ends,
        before the agent is told (:mod:`edge_agent.exit_records`)."""
        if not self.alive:
            raise OSError(0, "the unit spawner is not running")
        start_id = next(self._ids)
        fds = [stdout]
        stdio: list[int | None] = [None, 0, None]
        if stdin is not None:
            stdio[0] = len(fds)
            fds.append(stdin)
        if stderr is not None:
            stdio[2] = len(fds)
            fds.append(stderr)
        answer: asyncio.Future[SpawnedProcess] = self.loop.create_future()
        self._starting[start_id] = answer
        frame = encode_frame(
            {
                "op": "start",
                "id": start_id,
                "argv": list(argv),
                "env": dict(env),
                "cwd": cwd,
                "setup": setup.to_wire(),
                "fds": len(fds),
                "stdio": stdio,
                **({"exit_record": dict(exit_record)} if exit_record is not None else {}),
            }
        )
        try:
            async with self._send_lock:
                await self._send(frame, fds)
            return await asyncio.wait_for(asyncio.shield(answer), START_TIMEOUT_S)
        except BaseException:
            self._starting.pop(start_id, None)
            if answer.done() and not answer.cancelled() and answer.exception() is None:
                # Started while the caller gave up: it must not run untracked.
                _kill_group(answer.result().pid)
            raise

    async def _send(self, frame: bytes, fds: list[int]) -> None:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        while True:  # the fd goes with the first byte; a full buffer: wait until it drains
            try:
                sent = self.sock.sendmsg([frame], rights)
                break
            except BlockingIOError:
                await _writable(self.loop, self.sock)
        if sent < len(frame):
            await self.loop.sock_sendall(self.sock, frame[sent:])

    def _readable(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._lost("the unit spawner closed its socket")
            return
        try:
            messages = self._reader.feed(data)
        except ValueError as exc:
            self._lost(f"the unit spawner sent a bad frame ({exc})")
            return
        for message in messages:
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "ready":
            if not self._ready.done():
                self._ready.set_result(int(message["pid"]))
        elif op == "started":
            answer = self._starting.pop(int(message["id"]), None)
            pid = int(message["pid"])
            process = SpawnedProcess(pid, self.loop)
            process.forked_ahead = bool(message.get("ahead"))
            self._running[pid] = process  # its exit comes after this answer (the spawner's order)
            if answer is not None and not answer.done():
                answer.set_result(process)
            elif answer is None or answer.cancelled():
                _kill_group(pid)  # nobody waits for it any more
        elif op == "failed":
            answer = self._starting.pop(int(message["id"]), None)
            if answer is not None and not answer.done():
                number = int(message.get("errno") or 0)
                text = str(message.get("message", ""))
                answer.set_exception(OSError(number, text) if number else subprocess.SubprocessError(text))
        elif op == "exited":
            pid, code = int(message["pid"]), int(message["code"])
            running = self._running.pop(pid, None)
            if running is not None:
                running.settle(code)

    def _lost(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.sock.fileno())
        if not self._ready.done():
            self._ready.set_exception(OSError(0, why))
        for answer in self._starting.values():
            if not answer.done():
                answer.set_exception(OSError(0, why))
        self._starting.clear()
        running, self._running = self._running, {}
        if running:
            log.warning("%s: its %d unit process(es) die with it (PR_SET_PDEATHSIG)", why, len(running))
        for pid, process in running.items():
            self.loop.create_task(_settle_when_gone(pid, process), name=f"gone-{pid}")

    async def close(self) -> None:
        """Stop the spawner (the agent's units are stopped by then; any left die with it)."""
        self._lost("the agent closed the unit spawner")
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.process.wait), 5)
        except TimeoutError:
            self.process.kill()
            await asyncio.to_thread(self.process.wait)


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def now_writable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(sock.fileno(), now_writable)
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


async def _settle_when_gone(pid: int, process: SpawnedProcess) -> None:
    """A unit whose spawner died: killed by the kernel with it; its handle ends once it is gone."""
    _kill_group(pid)
    for _ in range(500):  # bounded: 10 s
        if _gone(pid):
            break
        await asyncio.sleep(0.02)
    process.settle(-signal.SIGKILL)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its new parent to reap it counts)."""
    try:
        stat = open(f"/proc/{pid}/stat", "rb").read()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
