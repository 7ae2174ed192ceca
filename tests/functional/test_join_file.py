"""Join tokens never sit on an agent's command line, where every process reads them in /proc.

Issue 20, finding 8: ``controlplane up`` started its agents with ``--join ep_join_...``, which
stayed in ``/proc/<pid>/cmdline`` (readable by user code) for the agent's lifetime. Real parts
only: ``controlplane up`` as a user runs it, and ``edge-agent run`` processes enrolling with a
real hub over a nats-server that admits enrolled nodes only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from harness import SecuredNats, poll, running_hub, secured_nats, wait_for

from controlplane.natsd import free_port
from controlplane.store.identities import IdentityStore

_poll = partial(poll, timeout=40.0, every=0.2)

TOKEN_PREFIX = b"ep_join_"


def _cmdlines() -> dict[int, bytes]:
    """Every process's command line, as any process of the machine may read it."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
    return found


def _agents_of(parent: int) -> list[int]:
    agents = []
    for pid, cmdline in _cmdlines().items():
        try:
            ppid = int((Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split())[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"edge_agent.cli" in cmdline:
            agents.append(pid)
    return agents


def _nodes(base: str, token: str) -> dict[str, str]:
    import json
    import urllib.request

    request = urllib.request.Request(f"{base}/v1/nodes", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return {n["name"]: n["status"] for n in json.loads(response.read())["items"]}
    except OSError:
        return {}


def test_up_hands_its_agents_their_join_tokens_by_file_never_on_the_command_line(tmp_path):
    port = free_port()
    data = tmp_path / "data"
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--agents", "2", "--port", str(port),
         "--data-dir", str(data), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert f"API {base}" in up.stdout.readline()
        # While the agents start (before and after they join) and once they run.
        agents = _poll(lambda: _agents_of(up.pid), lambda pids: len(pids) == 2)
        token = (data / "admin.token").read_text().strip()
        _poll(lambda: _nodes(base, token), lambda nodes: nodes == {"edge-1": "Ready", "edge-2": "Ready"})
        leaked = {pid: line for pid, line in _cmdlines().items() if TOKEN_PREFIX in line}
        assert not leaked, f"join tokens on command lines: {leaked}"
        for pid in agents:
            assert b"--join-file" in _cmdlines().get(pid, b"--join-file")
        for name in ("edge-1", "edge-2"):  # spent, so removed; the credentials are kept
            assert not (data / "agents" / name / "join.token").exists()
            assert (data / "agents" / name / "credentials.json").exists()
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert up.returncode == 0


@pytest.fixture
def secured(tmp_path: Path):
    with secured_nats(tmp_path / "nats") as nats_server:
        yield nats_server


def _agent(name: str, tmp_path: Path, *join: str, hub: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "edge_agent.cli", "run", "--name", name, "--heartbeat-interval", "0.25",
         "--cpu", "1", "--memory", "1Gi", "--work-dir", str(tmp_path / name), "--log-level", "WARNING",
         "--power-supply-path", str(tmp_path / "no-power"), *join, "--hub", hub],
        stderr=subprocess.PIPE, **popen,
    )  # fmt: skip


async def _ready(api, name: str, agent: subprocess.Popen[bytes]) -> None:
    async def status() -> str | None:
        assert agent.poll() is None, f"the agent exited: {agent.communicate()[1].decode()[-2000:]}"
        status, body = await api.call("GET", f"/v1/nodes/{name}")
        return body.get("status") if status == 200 else None

    await wait_for(status, lambda s: s == "Ready", timeout=30)


async def test_an_agent_enrols_with_a_join_token_from_a_file_or_from_stdin(
    secured: SecuredNats, sqlite_url, tmp_path
):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        identities = IdentityStore(running.hub.store)
        by_file = await identities.create_join_token("default", 60.0)
        by_stdin = await identities.create_join_token("default", 60.0)
        token_file = tmp_path / "join.token"
        token_file.write_text(by_file.token + "\n")
        token_file.chmod(0o600)
        agents = [
            _agent("edge-f", tmp_path, "--join-file", str(token_file), hub=running.url),
            _agent("edge-s", tmp_path, "--join", "-", hub=running.url, stdin=subprocess.PIPE),
        ]
        try:
            stdin = agents[1].stdin
            assert stdin is not None
            stdin.write(by_stdin.token.encode() + b"\n")
            stdin.close()
            agents[1].stdin = None  # closed: communicate() below must not flush it
            await asyncio.gather(_ready(api, "edge-f", agents[0]), _ready(api, "edge-s", agents[1]))
            for agent in agents:
                assert TOKEN_PREFIX not in Path(f"/proc/{agent.pid}/cmdline").read_bytes()
        finally:
            for agent in agents:
                agent.terminate()
            stderr = b"".join(agent.communicate(timeout=20)[1] for agent in agents)
        assert not token_file.exists(), "a spent join token file is removed"
        for name in ("edge-f", "edge-s"):
            credentials = tmp_path / name / "credentials.json"
            assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
        assert TOKEN_PREFIX not in stderr

        # Both flags at once, or an empty file: a configuration error naming the flag, no join.
        empty = tmp_path / "empty.token"
        empty.write_text("\n")
        for join in (["--join", "x", "--join-file", str(empty)], ["--join-file", str(empty)]):
            result = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "edge_agent.cli", "run", "--name", "edge-x", "--work-dir",
                 str(tmp_path / "edge-x"), *join, "--hub", running.url],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert result.returncode == 2 and "--join" in result.stderr, result.stderr
