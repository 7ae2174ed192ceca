"""The agent's small SQLite files (outbox, invocation record): opened one way, private to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["open_private_db"]


def open_private_db(path: Path, create_table: str) -> sqlite3.Connection:
    """Open (creating) ``path`` in autocommit WAL mode, durable across a process crash, mode 0600,
    with ``create_table`` (a ``CREATE TABLE IF NOT EXISTS``) run. Raises sqlite3.Error or OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None)  # autocommit: one write, one commit
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # durable across a process crash
        db.execute(create_table)
        path.chmod(0o600)  # reports and results are private to the agent
    except (sqlite3.Error, OSError):
        db.close()
        raise
    return db
