"""The agent's record of finished invocations and their results, kept in a small SQLite file so
that a hub which restarts (or lost its connection) can still learn a result after this agent has
restarted too: without it, an invocation that ran to its end would be failed and its result lost.

Bounded by count and by bytes: the oldest results go first. Every change is written through.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections import OrderedDict
from pathlib import Path

from edgeplane_contract.messages import InvokeResultV1, MessageError, decode

from edge_agent.local_db import open_private_db

__all__ = ["FinishedInvocations"]

log = logging.getLogger("edgeplane.agent.invocations")


class FinishedInvocations:
    """Finished invocations by id, mirrored in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None, *, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._results: OrderedDict[str, tuple[InvokeResultV1, int]] = OrderedDict()
        self._bytes = 0
        self._db: sqlite3.Connection | None = None
        if path is None:
            return
        try:
            self._db = open_private_db(
                path,
                "CREATE TABLE IF NOT EXISTS finished (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "invocation_id TEXT UNIQUE NOT NULL, body BLOB NOT NULL)",
            )
            unreadable: list[str] = []
            rows = self._db.execute("SELECT invocation_id, body FROM finished ORDER BY seq")
            for invocation_id, body in rows.fetchall():
                try:
                    result = decode(body, InvokeResultV1)
                except MessageError as exc:
                    log.warning("dropping an unreadable invocation record %s: %s", invocation_id, exc)
                    unreadable.append(invocation_id)
                    continue
                self._keep(result, len(body))
            self._delete(unreadable)
            self._trim()
        except (sqlite3.Error, OSError) as exc:
            # A broken file must not stop the agent: it keeps the record in memory.
            log.warning("invocation record %s unusable (%s): kept in memory only", path, exc)
            self._close()
        if self._results:
            log.info("%d finished invocation(s) from before the restart are on record", len(self._results))

    def __len__(self) -> int:
        return len(self._results)

    def __contains__(self, invocation_id: object) -> bool:
        return invocation_id in self._results

    def get(self, invocation_id: str) -> tuple[InvokeResultV1, int] | None:
        """The result and its encoded size, or None when not (or no longer) on record."""
        return self._results.get(invocation_id)

    def add(self, result: InvokeResultV1, payload: bytes) -> None:
        """Record ``result`` (``payload``: its encoding, as sent) and drop the oldest beyond the bounds."""
        if not result.invocation_id:
            return
        self._keep(result, len(payload))
        if self._db is not None:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO finished (invocation_id, body) VALUES (?, ?)",
                    (result.invocation_id, payload),
                )
            except sqlite3.Error as exc:
                log.warning("invocation record write failed (%s): kept in memory only from now", exc)
                self._close()
        self._trim()

    def close(self) -> None:
        self._close()

    def _keep(self, result: InvokeResultV1, size: int) -> None:
        previous = self._results.pop(result.invocation_id, None)
        if previous is not None:
            self._bytes -= previous[1]
        self._results[result.invocation_id] = (result, size)
        self._bytes += size

    def _trim(self) -> None:
        dropped: list[str] = []
        while self._results and (len(self._results) > self.max_count or self._bytes > self.max_bytes):
            invocation_id, (_, size) = self._results.popitem(last=False)
            self._bytes -= size
            dropped.append(invocation_id)
        self._delete(dropped)

    def _delete(self, ids: list[str]) -> None:
        if self._db is None or not ids:
            return
        try:
            self._db.executemany("DELETE FROM finished WHERE invocation_id = ?", [(i,) for i in ids])
        except sqlite3.Error as exc:
            log.warning("invocation record write failed (%s): kept in memory only from now", exc)
            self._close()

    def _close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
