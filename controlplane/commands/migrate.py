"""``controlplane migrate``: bring the store's schema to a revision (head by default)."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=os.environ.get("EDGEPLANE_DATABASE_URL"),
        help="SQLAlchemy URL (env EDGEPLANE_DATABASE_URL; default SQLite in --data-dir)",
    )
    parser.add_argument(
        "--data-dir", default=".edgeplane", help="where the SQLite store lives (default .edgeplane)"
    )
    parser.add_argument("--revision", default="head", help="target revision (default head)")
    parser.add_argument("--downgrade", action="store_true", help="downgrade to --revision instead")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_migrate(args))


async def _migrate(args: argparse.Namespace) -> int:
    from controlplane.store.db import create_engine, current_revision, downgrade, migrate, sqlite_url

    url = args.database_url or sqlite_url(Path(args.data_dir) / "edgeplane.sqlite3")
    engine = create_engine(url)
    try:
        before = await current_revision(engine)
        if args.downgrade:
            await downgrade(engine, args.revision)
        else:
            await migrate(engine, args.revision)
        after = await current_revision(engine)
    finally:
        await engine.dispose()
    print(f"schema: {before or '<empty>'} -> {after or '<empty>'}")
    return 0
