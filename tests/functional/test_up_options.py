"""``controlplane up``'s port options as an operator uses them (issue 22, item 5): the embedded
NATS server's port (``--nats-port``), the local agents' /metrics (``--agent-metrics``), and the
hub's own process and build metrics; a bad or taken port is one line before anything starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from functools import partial
from pathlib import Path

from harness import poll

from controlplane import __version__
from controlplane.natsd import free_port

_poll = partial(poll, timeout=30.0, every=0.2)
_ENV = {**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""}


def _text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def _up(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "controlplane.cli", "up", "--log-level", "ERROR",
            "--data-dir", str(tmp_path / "data"), *extra]  # fmt: skip


def test_up_puts_nats_and_the_agents_metrics_on_the_ports_asked_and_the_hub_exports_process_metrics(
    tmp_path: Path,
) -> None:
    api, nats, metrics = free_port(), free_port(), free_port()
    up = subprocess.Popen(
        _up(tmp_path, "--agents", "1", "--port", str(api), "--nats-port", str(nats),
            "--agent-metrics", str(metrics), "--public-metrics"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_ENV, text=True,
    )  # fmt: skip
    try:
        assert up.stdout is not None
        banner = [up.stdout.readline() for _ in range(7)]
        assert f"NATS nats://127.0.0.1:{nats}" in banner[0], banner
        announced = [line for line in banner if "/metrics" in line]
        assert announced and f"127.0.0.1:{metrics}" in announced[0], banner
        # The agent serves its metrics there once it runs; the hub exports process_* and its build.
        agent = _poll(lambda: _text(f"http://127.0.0.1:{metrics}/metrics"), lambda t: "edgeplane_agent" in t)
        assert "edgeplane_agent_hub_reachable" in agent
        hub = _text(f"http://127.0.0.1:{api}/metrics")
        assert "process_cpu_seconds_total " in hub and "process_resident_memory_bytes " in hub
        assert f'version="{__version__}"' in next(
            line for line in hub.splitlines() if line.startswith("edgeplane_build_info{")
        )
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=30)
    assert code == 0


def test_a_bad_or_taken_port_stops_up_at_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--nats-port", str(port)], f"--nats-port: 127.0.0.1:{port} is not free"),
            (["--nats-port", "70000"], "--nats-port: must be between 1 and 65535, got 70000"),
            (["--nats-port", "4222", "--nats", "nats://127.0.0.1:4222"], "--nats-port: sets the embedded"),
            (["--agents", "2", "--agent-metrics", str(port - 1)], f"127.0.0.1:{port} is not free"),
            (["--agents", "1", "--agent-metrics", "0"], "--agent-metrics: must be between 1 and 65535"),
        ]
        for extra, expected in cases:
            result = subprocess.run(
                _up(tmp_path, "--port", "0", *extra), capture_output=True, text=True, timeout=60, env=_ENV
            )
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, (extra, result.stderr)
            assert lines[0].startswith("controlplane up: configuration error: ") and expected in lines[0], (
                lines
            )
