"""Database engine creation and schema migration (alembic, programmatic)."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from controlplane.store import inline_sqlite  # registers sqlite+inline

__all__ = ["create_engine", "current_revision", "head_revision", "migrate", "normalize_url", "sqlite_url"]

log = logging.getLogger("edgeplane.store")

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def sqlite_url(path: str | Path) -> str:
    return f"sqlite+inline:///{Path(path).resolve()}"


def normalize_url(url: str) -> str:
    """Map plain URLs to the async drivers: sqlite -> the inline driver
    (:mod:`controlplane.store.inline_sqlite`), postgresql -> asyncpg. ``sqlite+aiosqlite`` stays."""
    if not url:
        raise ValueError("empty database URL")
    parsed = make_url(url)
    driver = parsed.drivername
    if driver in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+inline")
    elif driver in ("postgres", "postgresql", "postgresql+psycopg2", "postgresql+psycopg"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed.render_as_string(hide_password=False)


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine; SQLite gets WAL, foreign keys and a busy timeout."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:":
            _private_sqlite_file(Path(database))
        inline = make_url(url).drivername == "sqlite+inline"
        # The inline driver waits out a busy database with asyncio sleeps (its own timeout).
        connect_args = {} if inline else {"timeout": inline_sqlite.BUSY_WAIT_S}
        engine = create_async_engine(url, connect_args=connect_args, **kwargs)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            if not inline:
                cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_async_engine(url, pool_pre_ping=True, **kwargs)


def _private_sqlite_file(path: Path) -> None:
    """Create the SQLite file 0600 (its ``-wal``/``-shm`` take its mode) and take group and other
    bits off one an older version made 0644: it holds every workload's spec."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for file in (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(OSError):
            mode = stat.S_IMODE(file.stat().st_mode)
            if mode & 0o077:
                os.chmod(file, mode & 0o700)


def _alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


# The advisory lock key that serialises migrations on PostgreSQL ("edgemigr" as a 64-bit integer):
# not the hub lease's ("edgeplan", coordination/hub_lease.py), which the leader holds while it
# migrates at its start (the same key would have it wait on itself for ever).
MIGRATION_LOCK = int.from_bytes(b"edgemigr", "big") & 0x7FFF_FFFF_FFFF_FFFF


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision`` (head by default); one log line when it changed
    (alembic's own step-by-step lines are at DEBUG: ``setup_logging`` quiets them)."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    def _upgrade(connection: Connection) -> tuple[str | None, str | None]:
        if connection.dialect.name == "postgresql":
            # Several hubs (or their init containers) starting at once migrate one after the
            # other: the first upgrades, the others then find the schema at head. Held until this
            # transaction ends.
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        before = MigrationContext.configure(connection).get_current_revision()
        command.upgrade(_alembic_config(connection), revision)
        return before, MigrationContext.configure(connection).get_current_revision()

    async with engine.begin() as conn:
        before, after = await conn.run_sync(_upgrade)
    if before != after:
        log.info("store schema upgraded from %s to %s", before or "empty", after)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    from alembic import command

    def _downgrade(connection: Connection) -> None:
        command.downgrade(_alembic_config(connection), revision)

    async with engine.begin() as conn:
        await conn.run_sync(_downgrade)


async def current_revision(engine: AsyncEngine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    def _current(connection: Connection) -> str | None:
        return MigrationContext.configure(connection).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(_current)


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head()
