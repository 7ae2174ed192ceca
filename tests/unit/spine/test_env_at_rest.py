"""``env`` values sealed at rest (store/secrets.py) and the hub's private data dir (a real SQLite
file: what a copy of it gives away is read from its bytes)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from controlplane.commands.data_dir import private_data_dir
from controlplane.errors import ConfigError
from controlplane.store.db import sqlite_url
from controlplane.store.models import FunctionRow, WorkloadRow
from controlplane.store.secrets import PREFIX, EnvCipher, SecretsKeyError, load_env_cipher
from controlplane.store.store import Store
from edge_agent.config import load_agent_config

SECRET = "s3cr3t-Value-0f-The-Env"


def _cipher(byte: int = 7) -> EnvCipher:
    return EnvCipher(bytes([byte]) * 32, source="test.key")


@pytest.fixture
def umask_kept() -> Iterator[None]:
    """private_data_dir sets the process umask: the test gives the old one back."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


def test_a_sealed_value_opens_to_the_plain_one_and_does_not_contain_it() -> None:
    cipher = _cipher()
    sealed = cipher.seal(SECRET)
    assert sealed.startswith(PREFIX) and SECRET not in sealed
    assert cipher.seal(SECRET) != sealed  # a fresh nonce per value
    assert cipher.open(sealed) == SECRET
    assert cipher.seal(sealed) == sealed  # sealed once only
    assert cipher.open("plain from an older version") == "plain from an older version"


def test_a_spec_is_sealed_in_a_copy_and_only_its_env_values() -> None:
    cipher = _cipher()
    spec = {"name": "w", "command": ["echo", SECRET], "env": {"TOKEN": SECRET, "EMPTY": ""}}
    sealed = cipher.seal_spec(spec)
    assert spec["env"] == {"TOKEN": SECRET, "EMPTY": ""}  # the caller's dict is unchanged
    assert sealed["command"] == ["echo", SECRET] and set(sealed["env"]) == {"TOKEN", "EMPTY"}
    assert all(v.startswith(PREFIX) for v in sealed["env"].values())
    assert cipher.open_spec(sealed) == spec
    assert cipher.open_spec({"name": "no env"}) == {"name": "no env"}


def test_another_key_cannot_open_a_value_and_the_error_does_not_show_it() -> None:
    sealed = _cipher(1).seal(SECRET)
    with pytest.raises(SecretsKeyError) as caught:
        _cipher(2).open(sealed)
    assert SECRET not in str(caught.value) and "test.key" in str(caught.value)
    with pytest.raises(SecretsKeyError):
        _cipher(1).open(sealed[:-4] + "AAAA")  # altered


def test_the_key_file_is_made_private_once_and_reread(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    first = load_env_cipher(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_env_cipher(path).open(first.seal(SECRET)) == SECRET  # the same key, read back
    assert "secrets.key" in repr(first) and path.read_text().strip() not in repr(first)


def test_a_key_file_others_may_read_or_that_is_not_a_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.key"
    load_env_cipher(path)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_env_cipher(path)
    path.write_text("not base64 of 32 bytes\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not a secrets key"):
        load_env_cipher(path)
    with pytest.raises(ConfigError, match="no such"):
        load_env_cipher(tmp_path / "missing.key", create=False)


async def _write_specs(store: Store, suffix: str, env: dict[str, str]) -> None:
    now = time.time()
    async with store.session() as s:
        s.add(
            WorkloadRow(
                id=f"w{suffix}", name="w", spec={"name": "w", "env": env}, created_at=now, updated_at=now
            )
        )
        s.add(FunctionRow(name=f"f{suffix}", version=1, spec={"name": "f", "env": env}, created_at=now))


def _database_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


async def test_a_copied_database_holds_no_env_value_and_the_hub_reads_them_plain(tmp_path: Path) -> None:
    path = tmp_path / "edgeplane.sqlite3"
    cipher = _cipher()
    store = await Store.open(sqlite_url(path), env_cipher=cipher)
    try:
        await _write_specs(store, "1", {"TOKEN": SECRET})
        assert SECRET.encode() not in _database_bytes(path)  # the file and its -wal alone
        async with store.session() as s:
            workload, function = await s.get(WorkloadRow, "w1"), await s.get(FunctionRow, ("f1", 1))
            assert workload is not None and function is not None
            assert workload.spec["env"] == {"TOKEN": SECRET} and function.spec["env"] == {"TOKEN": SECRET}
            stored = await s.scalar(text("SELECT spec FROM workloads WHERE id = 'w1'"))
            assert PREFIX in str(stored) and SECRET not in str(stored)
    finally:
        await store.close()


async def test_plain_values_an_older_version_wrote_still_read_and_a_wrong_key_fails_at_open(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "edgeplane.sqlite3")
    old = await Store.open(url)  # an older hub: no key, env stored as it is
    try:
        await _write_specs(old, "old", {"TOKEN": "plain"})
    finally:
        await old.close()
    store = await Store.open(url, env_cipher=_cipher(1))
    try:
        async with store.session() as s:
            workload = await s.get(WorkloadRow, "wold")
            assert workload is not None and workload.spec["env"] == {"TOKEN": "plain"}
        await _write_specs(store, "new", {"TOKEN": SECRET})
    finally:
        await store.close()
    with pytest.raises(SecretsKeyError):
        await Store.open(url, env_cipher=_cipher(2))


def test_an_old_data_dir_is_made_private_and_other_files_are_left_alone(
    tmp_path: Path, umask_kept: None
) -> None:
    data = tmp_path / "data"
    (data / "agents" / "edge-1").mkdir(parents=True)
    for name in ("edgeplane.sqlite3", "edgeplane.sqlite3-wal", "nats-server.log", "notes.txt"):
        (data / name).write_text("x")
        (data / name).chmod(0o644)
    (data / "agents" / "edge-1" / "agent.log").write_text("x")
    for path in (data, data / "agents", data / "agents" / "edge-1"):
        path.chmod(0o755)
    (data / "agents" / "edge-1" / "agent.log").chmod(0o644)
    private_data_dir(data)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(data) == mode(data / "agents") == mode(data / "agents" / "edge-1") == 0o700
    for name in ("edgeplane.sqlite3", "edgeplane.sqlite3-wal", "nats-server.log"):
        assert mode(data / name) == 0o600, name
    assert mode(data / "agents" / "edge-1" / "agent.log") == 0o600
    assert mode(data / "notes.txt") == 0o644  # not the hub's
    assert os.umask(0o077) == 0o077  # what the hub's process creates from now on is private
    (data / "later").write_text("x")
    assert mode(data / "later") == 0o600


def test_a_sandbox_root_inside_the_work_dir_is_refused(tmp_path: Path) -> None:
    overrides = {"name": "edge-1", "work_dir": str(tmp_path / "work")}
    with pytest.raises(ConfigError, match="sandbox_root"):
        load_agent_config(None, {**overrides, "sandbox_root": str(tmp_path / "work" / "boxes")})
    config = load_agent_config(None, {**overrides, "sandbox_root": str(tmp_path / "boxes")})
    assert config.sandbox_root == str(tmp_path / "boxes")
