"""The README's tour, as a new user runs it: `controlplane up` with default options from a fresh
current directory (relative data dir), then the README's own curl commands, run by bash.

Only the port is changed (a free one instead of 8080); commands that need an id the user would
paste (``ID``) are left out. The client commands (``controlplane get`` ...) read the client config
that ``up`` wrote in the same directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from controlplane.natsd import free_port

README = Path(__file__).resolve().parents[2] / "README.md"


def _tour_commands() -> list[str]:
    """The shell block of the tour (the one that sets H), as logical commands."""
    text = README.read_text()
    start = text.index("```sh\nexport H=")
    block = text[start + len("```sh\n") : text.index("```", start + 5)]
    commands: list[str] = []
    for line in block.splitlines():
        if not line.strip():
            continue
        if line[0].isspace() and commands:
            commands[-1] += "\n" + line
        elif not line.startswith("#"):
            commands.append(line)
    return commands


def _get(base: str, path: str, token: str) -> dict:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read()))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README uses curl")
def test_the_readme_tour_works_as_written_from_a_fresh_directory(tmp_path):
    cwd = tmp_path / "fresh"
    cwd.mkdir()
    port = free_port()
    env = {**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""}
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--port", str(port), "--log-level", "WARNING"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    outputs: dict[str, str] = {}
    try:
        assert up.stdout is not None
        banner = up.stdout.readline() + up.stdout.readline()
        assert "edgeplane is up" in banner and ".edgeplane/admin.token" in banner, banner
        token = (cwd / ".edgeplane" / "admin.token").read_text().strip()
        deadline = time.monotonic() + 30
        while len([n for n in _get(base, "/v1/nodes", token)["items"] if n["status"] == "Ready"]) < 3:
            assert time.monotonic() < deadline, "3 agents did not become Ready"
            time.sleep(0.2)
        client_config = cwd / ".edgeplane" / "client.yaml"
        assert client_config.stat().st_mode & 0o777 == 0o600
        assert f"url: {base}\n" in client_config.read_text()
        commands = [c for c in _tour_commands() if not re.search(r"[/ ]ID\b", c)]
        assert len(commands) >= 9, commands
        prefix = commands[0]  # export H=...
        for command in commands[1:]:
            run = subprocess.run(
                ["bash", "-c", f"set -e\n{prefix}\n{command.replace('localhost:8080', f'127.0.0.1:{port}')}"],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert run.returncode == 0, (command, run.stdout, run.stderr)
            assert '{"error": {"code"' not in run.stdout, (command, run.stdout)
            outputs[command.split("\n")[0]] = run.stdout
        created = next(
            json.loads(out) for cmd, out in outputs.items() if "POST localhost:8080/v1/workloads" in cmd
        )
        deadline = time.monotonic() + 30
        while (workload := _get(base, f"/v1/workloads/{created['id']}", token))["status"] != "Succeeded":
            assert workload["status"] not in ("Failed", "Cancelled"), workload
            assert time.monotonic() < deadline, workload
            time.sleep(0.2)
        invoke = next(out for cmd, out in outputs.items() if "/invoke" in cmd)
        assert "HTTP/1.1 200" in invoke and invoke.rstrip().endswith('{"hi": 1}'), invoke
        nodes = next(out for cmd, out in outputs.items() if cmd.startswith("controlplane get nodes"))
        assert sorted(line.split()[0] for line in nodes.splitlines()[1:]) == ["edge-1", "edge-2", "edge-3"]
        applied = next(out for cmd, out in outputs.items() if cmd.startswith("controlplane apply"))
        assert applied.startswith("workload/hello-cli created (id "), applied
        assert (
            next(out for cmd, out in outputs.items() if cmd.startswith("controlplane invoke"))
            == '{"hi": 1}\n'
        )
        echo = _get(base, "/v1/functions/echo", token)
        assert echo["name"] == "echo"
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(timeout=10)
    assert up.returncode == 0
