"""The unit spawner's own program: a small, single-threaded process that forks units' processes.

The agent is a large, multi-threaded process (its heap, onnxruntime, NATS, SQLite): a fork of it
costs milliseconds of page-table copying and copy-on-write faults after, 4-5 ms per start on the
development machine against 0.35 ms for a small process (``bench/agent_start.py``). The agent
therefore starts this program once (:class:`edge_agent.spawner.UnitSpawner`) and asks it over a
socket pair to start each unit. Each start is an ordinary :class:`subprocess.Popen` here with the
same child setup as the direct path (:func:`edge_agent.child_process.child_setup`: cgroups,
limits, the uid drop, ``PR_SET_PDEATHSIG`` towards this process, no_new_privs, seccomp), so the
two paths differ only in who forks.

Protocol (frames of a 4-byte big-endian length and a JSON object, both ways):

* agent -> spawner ``{"op": "start", "id", "argv", "env", "cwd", "setup": {...}, "fds": N,
  "stdio": [stdin, stdout, stderr]}`` with N file descriptors attached (``SCM_RIGHTS``); each of
  ``stdio`` is an index into them, or null: stdin from ``/dev/null``, stderr to stdout.
  A start may carry ``"exit_record": {"path", "fields"}``: when that process ends, this program
  writes ``fields`` with ``code`` and ``finished_at`` to ``path`` (atomically, mode 0600) before it
  tells the agent (:mod:`edge_agent.exit_records`: an exit the agent never heard of, because it
  was killed in between, is still known to its next run).
* spawner -> agent ``{"op": "ready", "pid"}`` once, then per start ``{"op": "started", "id",
  "pid", "ahead"}`` (``ahead``: started by a process forked ahead, below) or ``{"op": "failed",
  "id", "errno", "message"}``, and ``{"op": "exited", "pid", "code"}`` when a started process
  ends (``code`` as ``Popen.returncode``: negative for a signal).

This process dies with the agent (``PR_SET_PDEATHSIG``), and the units it started die with it
(theirs points here): the same as units forked by the agent itself. It exits when the agent
closes the socket.

**The next unit is forked ahead of its start** (a *zygote*): a ``fork`` with a ``preexec_fn``
(the child runs Python: cgroups, limits, the uid drop, seccomp) costs 2-3 ms before the child's
first instruction, copy-on-write faults and the interpreter's after-fork work, where a ``vfork``
costs 0.3 ms (measured on the development machine: a Popen of ``true`` 3.1-3.4 ms with a
``preexec_fn`` against 0.6 ms without). So right after each start (and at its own start) this
program forks one child that sets itself to die with this process and waits; a start hands it the
unit's argv, env, cwd, setup and stdio fds (``SCM_RIGHTS``), and the child applies exactly what a
Popen child does (stdio, the other fds closed, the cwd, a new session, default SIGPIPE/SIGXFSZ,
:func:`edge_agent.child_process.child_setup`) and execs. The start waits for the exec (its
close-on-exec end of the pair closes) or the child's error (errno and message, raised in the agent
as Popen raises them). Without a zygote (its fork failed, a start larger than a datagram) the
start is a Popen as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any, NoReturn

from edge_agent.child_process import ChildSetup, child_setup, die_with_parent

HEADER = struct.Struct("!I")
MAX_FRAME = 64 * 2**20  # a start carries the unit's argv and env (the hub bounds a spec far below)
MAX_FDS = 8
# A start handed to a zygote is one datagram; a larger one (a huge env) goes through Popen.
ZYGOTE_MAX_START = 64 * 1024
ZYGOTE_EXEC_TIMEOUT_S = 30.0  # a zygote that neither execs nor fails by then is killed (start failed)


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


class FrameReader:
    """Splits a byte stream into frames (JSON objects); raises ValueError on a bad frame."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes")
            if len(self._buffer) < HEADER.size + length:
                break
            body = bytes(self._buffer[HEADER.size : HEADER.size + length])
            del self._buffer[: HEADER.size + length]
            message = json.loads(body)
            if not isinstance(message, dict):
                raise ValueError("a frame that is not an object")
            frames.append(message)
        return frames


class Spawner:
    """The server loop: starts from the socket, exits reaped on SIGCHLD."""

    def __init__(self, sock: socket.socket, *, seccomp: Any) -> None:
        self.sock = sock
        self.seccomp = seccomp  # a built filter (UnitFilter) or None
        self.children: dict[int, subprocess.Popen[bytes] | Exec] = {}
        self.zygote: Zygote | None = None  # the next unit, forked ahead (None: none ready)
        self.exit_records: dict[int, dict[str, Any]] = {}  # pid -> the start's "exit_record"
        self.fds: list[int] = []
        self.reader = FrameReader()
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode_frame(message))

    def run(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the fd
        self.selector.register(self.sock, selectors.EVENT_READ, "sock")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "chld")
        self.send({"op": "ready", "pid": os.getpid()})
        self.fork_zygote()
        while True:
            for key, _ in self.selector.select():
                if key.data == "chld":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                    self.reap()
                elif not self.read():
                    return

    def read(self) -> bool:
        """Handle what the agent sent; False once it closed the socket."""
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, MAX_FDS)
        except InterruptedError:
            return True
        self.fds.extend(fds)
        if not data:
            return False
        for message in self.reader.feed(data):
            if message.get("op") == "start":
                self.start(message)
        return True

    def fork_zygote(self) -> None:
        """Fork the next unit ahead of its start (see the module docstring); on failure (a pids
        limit, no memory) there is none, and the next start forks as it comes."""
        if self.zygote is not None:
            return
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return
        if pid == 0:  # the zygote: never returns
            ours.close()
            inherited = [self.sock.fileno(), self.wake_r, self.wake_w, self.selector.fileno(), *self.fds]
            _zygote_main(theirs, parent, self.seccomp, inherited)
        theirs.close()
        self.zygote = Zygote(pid, ours)

    def start(self, message: dict[str, Any]) -> None:
        start_id = message.get("id")
        count = message.get("fds", 1)
        fds = [self.fds.pop(0) for _ in range(min(count, len(self.fds)))] if isinstance(count, int) else []
        try:
            if not fds or len(fds) != count:
                raise OSError(0, "the file descriptors did not come with the start")
            stdin_at, stdout_at, stderr_at = message.get("stdio", [None, 0, None])
            setup = ChildSetup.from_wire(message["setup"])
            pid = self.start_in_zygote(message, fds)
            if pid is None:  # no zygote ready: forked now
                popen = subprocess.Popen(
                    message["argv"],
                    stdin=subprocess.DEVNULL if stdin_at is None else fds[stdin_at],
                    stdout=fds[stdout_at],
                    stderr=subprocess.STDOUT if stderr_at is None else fds[stderr_at],
                    cwd=message["cwd"],
                    env=message["env"],
                    start_new_session=True,
                    preexec_fn=setup.preexec(self.seccomp.load if self.seccomp is not None else None),
                )
                pid = popen.pid
                self.children[pid] = popen
            else:
                self.children[pid] = Exec()
                message["ahead"] = True
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError, IndexError) as exc:
            number = exc.errno if isinstance(exc, OSError) else 0
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            reply: dict[str, Any] = {"op": "failed", "id": start_id, "errno": number or 0, "message": text}
        else:
            reply = self._started(pid, message)
        finally:
            # Our copies go before the agent hears "started": after it, the unit holds the only
            # ends, so a unit that closed its input makes the agent's first write fail (EPIPE)
            # instead of filling a pipe nobody reads.
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.send(reply)
        self.fork_zygote()  # the next unit's fork, now that this one's start is answered

    def _started(self, pid: int, message: dict[str, Any]) -> dict[str, Any]:
        record = message.get("exit_record")
        if isinstance(record, dict) and isinstance(record.get("path"), str):
            self.exit_records[pid] = record
        return {"op": "started", "id": message.get("id"), "pid": pid, "ahead": bool(message.get("ahead"))}

    def start_in_zygote(self, message: dict[str, Any], fds: list[int]) -> int | None:
        """Hand the start to the zygote and wait for its exec: its pid; None when there is no
        zygote or it cannot take this start (then Popen starts it). Raises OSError (errno and
        message) when the unit could not start, as Popen does."""
        zygote, self.zygote = self.zygote, None
        if zygote is None:
            return None
        wanted = {k: message[k] for k in ("argv", "env", "cwd", "setup")}
        wanted["stdio"] = message.get("stdio", [None, 0, None])
        body = json.dumps(wanted).encode()
        try:
            if len(body) > ZYGOTE_MAX_START:
                raise OSError(0, "too large for a datagram")
            socket.send_fds(zygote.control, [body], fds)
        except OSError:
            zygote.discard()  # it is not told anything: it dies, and is reaped as a stranger
            return None
        zygote.control.settimeout(ZYGOTE_EXEC_TIMEOUT_S)
        try:
            answer = zygote.control.recv(65536)  # b"": its end closed on exec
        except OSError:  # no exec and no answer in time
            zygote.discard()
            raise OSError(0, "the unit did not start within 30 s") from None
        zygote.control.close()
        if answer:
            try:
                failure = json.loads(answer)
                number, text = int(failure.get("errno") or 0), str(failure.get("message", ""))
            except (ValueError, AttributeError):
                number, text = 0, "the unit's start failed"
            raise OSError(number, text)
        return zygote.pid

    def reap(self) -> None:
        """Every exited child's code to the agent (only ours: Popen's own table stays empty); a
        zygote that ended unused, or whose start failed, is reaped without a word."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.zygote is not None and pid == self.zygote.pid:
                self.zygote.control.close()
                self.zygote = None
            popen = self.children.pop(pid, None)
            code = os.waitstatus_to_exitcode(status)
            if popen is not None:
                popen.returncode = code  # reaped here: Popen must not wait for it again
                record = self.exit_records.pop(pid, None)
                if record is not None:  # first: the agent may die before it reads the frame below
                    write_exit_record(record, code)
                self.send({"op": "exited", "pid": pid, "code": code})


class Exec:
    """A unit a zygote started: what ``reap`` records its code on (a Popen's role)."""

    returncode: int | None = None


class Zygote:
    """The next unit's process, forked ahead and waiting for its start on ``control``."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.control = control

    def discard(self) -> None:
        """Give it up: it exits when its end of the pair closes (and is reaped as any child)."""
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        self.control.close()


def _zygote_main(control: socket.socket, parent: int, seccomp: Any, inherited: list[int]) -> NoReturn:
    """The zygote: wait for a start on ``control`` and become that unit, as a Popen child would
    (stdio, no other fd, cwd, new session, default SIGPIPE/SIGXFSZ, :func:`child_setup`), or
    send the reason it could not (errno and message) and exit 127."""
    failure: dict[str, Any]
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        if not die_with_parent(parent):
            os._exit(0)
        data, fds, _, _ = socket.recv_fds(control, ZYGOTE_MAX_START, MAX_FDS)
        if not data:  # the spawner let go of it
            os._exit(0)
        start = json.loads(data)
        stdin_at, stdout_at, stderr_at = start["stdio"]
        stdin = os.open(os.devnull, os.O_RDONLY) if stdin_at is None else fds[stdin_at]
        stdout = fds[stdout_at]
        stderr = stdout if stderr_at is None else fds[stderr_at]
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target, inheritable=True)
        keep = control.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 20)
        os.chdir(start["cwd"])
        os.setsid()
        for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # as Popen's restore_signals
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        setup = ChildSetup.from_wire(start["setup"])
        child_setup(
            procs=setup.procs,
            memory_bytes=setup.memory_bytes,
            uid=setup.uid,
            gid=setup.gid,
            parent_pid=parent,
            no_new_privs=setup.no_new_privs,
            seccomp=seccomp.load if seccomp is not None and setup.seccomp else None,
        )()
        argv = [str(a) for a in start["argv"]]
        os.execvpe(argv[0], argv, {str(k): str(v) for k, v in start["env"].items()})
    except OSError as exc:
        failure = {"errno": exc.errno or 0, "message": exc.strerror or str(exc)}
    except BaseException as exc:  # a bad start message: said, not raised (the process must end)
        failure = {"errno": 0, "message": f"{type(exc).__name__}: {exc}"}
    try:
        control.send(json.dumps(failure).encode())
    finally:
        os._exit(127)


def write_exit_record(record: dict[str, Any], code: int) -> None:
    """Write a start's exit record (``fields`` with ``code`` and ``finished_at``) to its ``path``:
    a temporary file renamed over it, so a reader sees the whole record or none. No fsync: it
    must outlive the agent's process, not the machine (whose units die with it anyway)."""
    path = str(record["path"])
    fields = record.get("fields")
    body = json.dumps(
        {**(fields if isinstance(fields, dict) else {}), "code": code, "finished_at": time.time()}
    )
    temporary = f"{path}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # a leftover temporary file keeps its old mode through O_CREAT
            os.write(fd, body.encode())
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        pass  # a full disk or a removed work dir: the agent hears the exit the usual way


def main(argv: list[str]) -> int:
    """``spawner_process SOCKET_FD AGENT_PID SECCOMP(0|1)``."""
    sock_fd, agent_pid, seccomp_wanted = int(argv[0]), int(argv[1]), argv[2] == "1"
    if not die_with_parent(agent_pid):
        return 0  # the agent is gone already
    sock = socket.socket(fileno=sock_fd)
    unit_filter = None
    if seccomp_wanted:
        from edge_agent.seccomp_filter import build_filter

        unit_filter = build_filter()  # raises where it cannot: the agent then forks units itself
    try:
        Spawner(sock, seccomp=unit_filter).run()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the agent went away
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
