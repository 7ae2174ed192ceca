"""Issue 20, finding 2: user code read the hub's store. On a ``controlplane up`` host the data dir
was 0755 and the SQLite file 0644 (the agents' sandboxes lived under it), so a workload and a
Python function read every ``env`` secret from the database.

Real processes: ``controlplane up --agents 1`` (its nats-server, hub and agent), a workload and
a function running as the agent's run user. Now the data dir is 0700 and every file in it 0600,
the units' work dirs are outside it, and ``env`` values are encrypted at rest with a key file
the database never holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from harness import CONFINED_PY, poll

from controlplane.natsd import free_port

_poll = partial(poll, timeout=45.0, every=0.2)

SECRET = "hunter2-tenant-secret-in-env"
# Tries to read (open and read a byte, or list) every path it is given; says which it could, and
# a digest of its own env value (the value itself would land in a log).
PROBE = """
import hashlib, json, os

def probe(paths):
    readable = []
    for path in paths:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as f:
                    f.read(1)
            readable.append(path)
        except OSError:
            pass
    digest = hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest()
    return {"uid": os.getuid(), "readable": readable, "token_sha256": digest, "tried": len(paths)}
"""
WORKLOAD = PROBE + "print(json.dumps(probe(json.loads(os.environ['PATHS']))))\n"
FUNCTION = PROBE + "def handle(event, context):\n    return probe(event['paths'])\n"


def _call(method: str, url: str, token: str, body: object = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextmanager
def _up(data_dir: Path) -> Iterator[tuple[str, str]]:
    """``controlplane up --agents 1`` on ``data_dir``: (API base URL, admin token) once edge-1 is
    Ready; stopped with Ctrl-C afterwards."""
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "up", "--agents", "1", "--port", str(port),
         "--data-dir", str(data_dir), "--log-level", "WARNING", "--heartbeat-interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        assert f"API {base}" in (up.stdout.readline() if up.stdout else "")
        token = (data_dir / "admin.token").read_text().strip()
        _poll(
            lambda: _call("GET", f"{base}/v1/nodes/edge-1", token),
            lambda r: r[0] == 200 and r[1]["status"] == "Ready",
        )
        yield base, token
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)


def _tree(*roots: Path) -> list[Path]:
    """Every directory and file under ``roots`` (the roots too), symlinks left out."""
    found: list[Path] = []
    for root in roots:
        found.append(root)
        for folder, dirs, files in os.walk(root):
            found += [Path(folder) / name for name in [*dirs, *files]]
    return [p for p in found if not p.is_symlink()]


def _modes(root: Path) -> dict[str, str]:
    """Paths under ``root`` whose mode is not 0700 (a directory) or 0600 (a file)."""
    wrong = {}
    for path in _tree(root):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong[str(path)] = oct(mode)
    return wrong


def _database_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in data_dir.glob("edgeplane.sqlite3*") if p.is_file())


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A directory anyone may enter (pytest's tmp_path is 0700 for root: a unit could not reach
    the data dir however open it was, and the test would pass on the old code)."""
    parent = Path(tempfile.mkdtemp(prefix="edgeplane-store-", dir="/tmp"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def test_up_keeps_its_data_dir_private_and_env_values_encrypted_at_rest(open_parent: Path) -> None:
    data_dir = open_parent / "data"
    with _up(data_dir) as (base, token):
        status, submitted = _call(
            "POST",
            f"{base}/v1/workloads",
            token,
            {"name": "holder", "command": ["true"], "env": {"TOKEN": SECRET}},
        )
        assert status in (200, 201, 202), submitted
        status, reply = _call(
            "POST",
            f"{base}/v1/functions",
            token,
            {
                "name": "f",
                "source": "def handle(e, c):\n    return 1\n",
                "handler": "handle",
                "env": {"TOKEN": SECRET},
            },
        )
        assert status in (200, 201), reply
        # The admin still reads the plain value back through the API (decrypted by the hub).
        status, workload = _call("GET", f"{base}/v1/workloads/{submitted['id']}", token)
        assert status == 200 and workload["spec"]["env"] == {"TOKEN": SECRET}, workload
        stored = _database_bytes(data_dir)
        assert b"holder" in stored  # the rows are there (the WAL counts) ...
        assert SECRET.encode() not in stored  # ... their env values are not, in any form
        assert not _modes(data_dir), _modes(data_dir)
    assert stat.S_IMODE((data_dir / "secrets.key").stat().st_mode) == 0o600
    assert SECRET.encode() not in _database_bytes(data_dir)  # after the checkpoint at stop too


def test_an_old_install_is_made_private_at_start(open_parent: Path) -> None:
    data_dir = open_parent / "data"
    (data_dir / "agents" / "edge-1").mkdir(parents=True)
    for path in (data_dir, data_dir / "agents", data_dir / "agents" / "edge-1"):
        path.chmod(0o755)
    for name in ("nats-server.log", "edgeplane.sqlite3"):
        (data_dir / name).touch(mode=0o644)
        (data_dir / name).chmod(0o644)
    with _up(data_dir):
        assert not _modes(data_dir), _modes(data_dir)


def test_a_workload_and_a_function_cannot_read_anything_the_hub_or_the_agent_wrote(open_parent: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: user code runs as the hub's own user (no isolation to test)")
    if CONFINED_PY is None:
        pytest.skip("no Python interpreter the run user may run on this machine")
    data_dir = open_parent / "data"
    with _up(data_dir) as (base, token):
        function = {"name": "probe", "source": FUNCTION, "handler": "handle", "env": {"TOKEN": SECRET}}
        status, reply = _call("POST", f"{base}/v1/functions", token, function)
        assert status in (200, 201), reply
        paths = [str(p) for p in _tree(data_dir)]  # the agent's work dir is data/agents/edge-1
        assert len(paths) > 10 and any(p.endswith("-wal") for p in paths), paths
        spec = {
            "name": "probe",
            "command": [CONFINED_PY, "-c", WORKLOAD],
            "env": {"TOKEN": SECRET, "PATHS": json.dumps(paths)},
        }
        status, reply = _call("POST", f"{base}/v1/workloads", token, spec)
        assert status in (200, 201, 202), reply
        done = _poll(
            lambda: _call("GET", f"{base}/v1/workloads/{reply['id']}", token)[1],
            lambda w: w["status"] in ("Succeeded", "Failed"),
        )
        assert done["status"] == "Succeeded", done
        log = data_dir / "agents" / "edge-1" / "logs" / f"{done['placements'][0]['id']}.log"
        from_workload = json.loads(log.read_text().strip().splitlines()[-1])
        status, from_function = _call("POST", f"{base}/v1/functions/probe/invoke", token, {"paths": paths})
        assert status == 200, from_function
        # Both ran, as the unprivileged user, with their env decrypted, and tried every path.
        digest = hashlib.sha256(SECRET.encode()).hexdigest()
        for seen in (from_workload, from_function):
            assert seen["uid"] != 0 and seen["token_sha256"] == digest and seen["tried"] == len(paths), seen
            assert seen["readable"] == [], seen["readable"]
        # Their work dirs were outside the data dir: it never needed to be open to them.
        assert not _modes(data_dir), _modes(data_dir)
