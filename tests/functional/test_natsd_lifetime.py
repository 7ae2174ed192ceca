"""A nats-server started by a process (``controlplane up`` or ``serve``, embedded) does not outlive
it, even when that process is killed with SIGKILL and has no chance to stop it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STARTER = """
import time
from controlplane.natsd import NatsServer
server = NatsServer().start()
print(server.process.pid, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie waits for whoever adopted it to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_nats_server_dies_with_the_process_that_started_it() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    nats_pid = 0
    try:
        assert starter.stdout is not None
        nats_pid = int(starter.stdout.readline())
        assert _running(nats_pid)
        starter.kill()  # no cleanup runs in the starter
        starter.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _running(nats_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(nats_pid), "nats-server outlived the process that started it"
    finally:
        starter.kill()
        starter.wait(timeout=10)
        if nats_pid and _running(nats_pid):
            with contextlib.suppress(OSError):
                os.kill(nats_pid, signal.SIGKILL)
