"""Shared fixtures: a real nats-server per session, fresh SQLite files, PostgreSQL when reachable."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from controlplane.natsd import NatsServer


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """One real nats-server for the session, on a free loopback port (never 4222)."""
    server = NatsServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'edgeplane.sqlite3'}"


def _postgres_base_url() -> str | None:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            pass
    except OSError:
        return None
    return "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database (created and dropped per test); skips without a server."""
    base = _postgres_base_url()
    if base is None:
        pytest.skip("no PostgreSQL server reachable (set DATABASE_URL or run one on 127.0.0.1:5432)")
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(base)
    admin_dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = await asyncio.wait_for(asyncpg.connect(admin_dsn), timeout=5)
    except Exception as exc:
        pytest.skip(f"PostgreSQL at {parsed.host}:{parsed.port} not usable: {exc}")
    name = f"edgeplane_test_{uuid.uuid4().hex[:10]}"
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        await admin.close()
        pytest.skip(f"cannot create a test database: {exc}")
    try:
        yield parsed.set(drivername="postgresql+asyncpg", database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
