"""Alembic environment: async engines, used both by the ``alembic`` CLI and programmatically.

Programmatic use (``controlplane.store.db.migrate``) passes an open sync connection in
``config.attributes["connection"]``; the CLI builds an async engine from the URL.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from controlplane.store.db import normalize_url
from controlplane.store.models import Base

config = context.config
target_metadata = Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_configure_and_run)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=normalize_url(config.get_main_option("sqlalchemy.url") or ""),
        target_metadata=target_metadata,
        literal_binds=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    import os

    url = os.environ.get("EDGEPLANE_DATABASE_URL") or config.get_main_option("sqlalchemy.url") or ""
    asyncio.run(_run_async(normalize_url(url)))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
