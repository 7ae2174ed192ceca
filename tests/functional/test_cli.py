"""The README's first command, ``controlplane up``, as a user runs it: separate processes, real HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

from harness import poll

from controlplane.natsd import free_port
from controlplane.store.db import head_revision

_poll = partial(poll, timeout=20.0, every=0.1)


def _get(url: str, token: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _post(url: str, body: dict, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_controlplane_up_runs_hub_nats_and_agents_and_ctrl_c_stops_them_all(tmp_path):
    port = free_port()
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "up",
            "--agents",
            "2",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        banner = up.stdout.readline()
        assert f"API {base}" in banner, banner
        token_file = tmp_path / "data" / "admin.token"
        assert f"admin token in {token_file}" in up.stdout.readline()
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        # Without the token the API answers 401 (the usual JSON error), /healthz stays open.
        assert _get(f"{base}/v1/nodes")[0] == 401
        assert _get(f"{base}/healthz")[0] in (200, 503)
        nodes = _poll(
            lambda: _get(f"{base}/v1/nodes", token)[1], lambda body: len(body.get("items", [])) == 2
        )
        assert {n["status"] for n in nodes["items"]} == {"Ready"}
        # The local agents share the machine rather than each offering all of it.
        offered_cpu = sum(n["resources"]["cpu"] for n in nodes["items"])
        assert offered_cpu <= (os.cpu_count() or 1) + 0.01
        offered_memory = sum(n["resources"]["memory"] for n in nodes["items"])
        assert offered_memory <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        children = _children(up.pid)
        assert len(children) == 3, "nats-server and two agents"
        status, created = _post(
            f"{base}/v1/workloads",
            {
                "name": "hello",
                "command": ["sh", "-c", "echo hi"],
                "resources": {"cpu": 0.5, "memory": "64Mi"},
            },
            token,
        )
        assert status == 201
        done = _poll(
            lambda: _get(f"{base}/v1/workloads/{created['id']}", token)[1],
            lambda w: w["status"] == "Succeeded",
        )
        assert done["exit_code"] == 0 and done["node"] in {"edge-1", "edge-2"}
        assert (tmp_path / "data" / "edgeplane.sqlite3").exists()
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=30)
    assert code == 0
    after = up.stdout.read()
    assert "disconnected" not in after, after  # a clean stop warns of nothing
    for child in children:
        assert (
            not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
        )


def test_a_bad_federation_file_fails_at_start_naming_file_key_and_reason(tmp_path):
    bad = tmp_path / "federation.yaml"
    bad.write_text("clusters:\n  - name: a\n    region: eu\n  - name: a\n    region: us\n")
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "up", "--federation", str(bad), "--agents", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{bad}: clusters[1].name: duplicate cluster name 'a'" in result.stderr


def test_an_agent_with_a_bad_config_file_fails_at_start(tmp_path):
    config = tmp_path / "agent.yaml"
    config.write_text("name: n1\nheartbeat_interval_s: fast\n")
    result = subprocess.run(
        [sys.executable, "-m", "edge_agent.cli", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{config}: heartbeat_interval_s: must be a number" in result.stderr


def test_controlplane_migrate_creates_the_schema(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "migrate", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": ""},
    )
    assert result.returncode == 0, result.stderr
    assert f"schema: <empty> -> {head_revision()}" in result.stdout


def test_up_fails_fast_with_one_line_when_the_port_the_store_or_nats_is_unusable(tmp_path):
    """Issue 11, finding 5: before, these were tracebacks, and an unreachable NATS hung forever."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--port", str(port)], f"cannot serve the API on 127.0.0.1:{port}"),
            (["--database-url", "postgresql://ops:s3cret@127.0.0.1:1/x"], "cannot open the store at "
             "postgresql://ops:***@127.0.0.1:1/x"),
            (["--database-url", "not-a-url"], "cannot open the store at not-a-url"),
            (["--nats", "nats://127.0.0.1:1", "--nats-connect-timeout", "2"],
             "no NATS server answered at nats://127.0.0.1:1 within 2 s"),
        ]  # fmt: skip
        for extra, expected in cases:
            started = time.monotonic()
            result = subprocess.run(
                [sys.executable, "-m", "controlplane.cli", "up", "--agents", "0", "--log-level", "ERROR",
                 "--data-dir", str(tmp_path / "data"), *extra],
                capture_output=True, text=True, timeout=60, cwd=tmp_path,
            )  # fmt: skip
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 1 and len(lines) == 1, (extra, result.stderr)
            assert lines[0].startswith("controlplane up: ") and expected in lines[0], lines
            assert "s3cret" not in result.stderr + result.stdout
            assert time.monotonic() - started < 20, extra


def test_up_restarts_a_crashed_agent_and_stops_when_one_cannot_start(tmp_path):
    """Issue 11, finding 5: an agent that died stayed dead, and one that could not start left `up`
    running with no agents and no word."""
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--agents", "1", "--port", str(port),
         "--data-dir", str(tmp_path / "data"), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert f"API {base}" in up.stdout.readline()
        token = (tmp_path / "data" / "admin.token").read_text().strip()
        _poll(
            lambda: _get(f"{base}/v1/nodes/edge-1", token),
            lambda r: r[0] == 200 and r[1]["status"] == "Ready",
        )
        agent = next(pid for pid in _children(up.pid) if b"edge_agent.cli" in _cmdline(pid))
        os.kill(agent, signal.SIGKILL)
        _line_with(up.stderr, "agent edge-1 exited with code -9; restarting it in 1 s")
        _line_with(up.stderr, "agent edge-1 restarted")
        # It comes back under the same identity (its stored credentials) and is Ready again.
        _poll(lambda: [p for p in _children(up.pid) if p != agent and b"edge_agent.cli" in _cmdline(p)], bool)
        boot = _get(f"{base}/v1/nodes/edge-1", token)[1]["last_heartbeat_at"]
        _poll(
            lambda: _get(f"{base}/v1/nodes/edge-1", token)[1],
            lambda n: n["status"] == "Ready" and n["last_heartbeat_at"] != boot,
        )
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert up.returncode == 0

    bad = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "up", "--agents", "1", "--agent-cpu", "lots",
         "--data-dir", str(tmp_path / "data2")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--agent-cpu" in bad.stderr and "edgeplane is up" not in bad.stdout


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _line_with(stream, text: str, max_lines: int = 200) -> str:
    """Read ``stream`` up to the first line holding ``text`` (agents log there too)."""
    seen = []
    for _ in range(max_lines):
        line = stream.readline()
        if not line:
            break
        if text in line:
            return line
        seen.append(line)
    raise AssertionError(f"no line with {text!r}; read: {seen}")


def test_a_bad_bid_shield_margin_fails_at_start_in_one_line(tmp_path):
    for raw in ("-0.1", "nan", "wide"):
        result = subprocess.run(
            [sys.executable, "-m", "controlplane.cli", "up", "--agents", "0", "--bid-shield-margin", raw,
             "--data-dir", str(tmp_path / "data")],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (raw, result.stderr)
        assert "--bid-shield-margin: must be a number in [0, 2] or 'off'" in lines[0], lines
