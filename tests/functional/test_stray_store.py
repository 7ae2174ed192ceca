"""The admin commands that work on the store refuse to make one: run in the wrong directory they
would write a token into a new, stray ``./.edgeplane/edgeplane.sqlite3`` that the running hub
never reads. Only ``up``, ``serve`` and ``migrate`` create a store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGEPLANE_DATABASE_URL"}
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *argv],
        cwd=cwd,
        env={**env, "HOME": str(cwd), "EDGEPLANE_CONFIG": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["token", "create", "--name", "x", "--scope", "read"],
        ["token", "list"],
        ["token", "revoke", "x"],
        ["agent-token", "create"],
        ["agent-credentials", "create", "--name", "edge-1", "--out", "edge-1.json"],
        ["node", "rekey", "edge-1"],
        ["node", "approve-capacity", "edge-1"],
        ["nats-config"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_an_admin_command_in_an_empty_directory_refuses_to_make_a_store(tmp_path, argv):
    done = _cli(tmp_path, *argv)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    looked_for = tmp_path.resolve() / ".edgeplane" / "edgeplane.sqlite3"
    assert f"no store at {looked_for}" in lines[0]
    assert "--data-dir" in lines[0] and "--database-url" in lines[0] and "EDGEPLANE_DATABASE_URL" in lines[0]
    assert not (tmp_path / ".edgeplane").exists()
    assert not (tmp_path / "edge-1.json").exists()


def test_a_missing_sqlite_database_url_is_refused_too(tmp_path):
    missing = tmp_path / "elsewhere" / "hub.sqlite3"
    done = _cli(tmp_path, "token", "list", "--database-url", f"sqlite:///{missing}")
    assert done.returncode == 2 and f"no store at {missing.resolve()}" in done.stderr
    assert not missing.parent.exists()


def test_token_create_works_on_a_store_that_migrate_made(tmp_path):
    data = tmp_path / "hub-data"
    made = _cli(tmp_path, "migrate", "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _cli(elsewhere, "token", "create", "--name", "x", "--scope", "read", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "shown once" in done.stderr
    listed = _cli(elsewhere, "token", "list", "--data-dir", str(data))
    assert listed.returncode == 0 and " x " in listed.stdout
    assert not (elsewhere / ".edgeplane").exists()
