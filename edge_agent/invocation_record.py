"""The agent's record of finished invocations and their results, kept in a small SQLite file so
that a hub which restarts (or lost its connection) can still learn a result after this agent has
restarted too: without it, an invocation that ran to its end would be failed and its result lost.

Bounded by count and by bytes: the oldest results go first. Every result is written through
before its answer is sent: :meth:`FinishedInvocations.record` joins the results finished in the
same event-loop turn into one transaction (a commit per invocation was most of the agent's time per
warm call under load); the oldest results' rows go in batches (``DELETE_BATCH``), and all at
:meth:`close`, so the file holds at most that many beyond the bounds, which a reopen trims.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections import OrderedDict
from pathlib import Path

from edgeplane_contract.messages import InvokeResultV1, MessageError, decode

from edge_agent.local_db import open_private_db

__all__ = ["FinishedInvocations"]

log = logging.getLogger("edgeplane.agent.invocations")

# Rows of results past the bounds deleted together (a reopen trims to the bounds anyway).
DELETE_BATCH = 64
_INSERT = "INSERT OR REPLACE INTO finished (invocation_id, body) VALUES (?, ?)"


class FinishedInvocations:
    """Finished invocations by id, mirrored in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None, *, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._results: OrderedDict[str, tuple[InvokeResultV1, int]] = OrderedDict()
        self._bytes = 0
        self._db: sqlite3.Connection | None = None
        # Rows to delete (results past the bounds), and to insert at the end of this loop turn.
        self._dropped: dict[str, None] = {}
        self._unwritten: list[tuple[str, bytes]] = []
        self._written: asyncio.Future[None] | None = None
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
            self._delete(list(self._dropped))
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
        """Record ``result`` (``payload``: its encoding, as sent) and drop the oldest beyond the
        bounds; written to the file before it returns."""
        if not result.invocation_id:
            return
        self._keep(result, len(payload))
        self._write([(result.invocation_id, payload)])
        self._trim()

    async def record(self, result: InvokeResultV1, payload: bytes) -> None:
        """:meth:`add`, in one transaction with the others recorded in the same event-loop turn;
        returns once it is written (or the file failed: kept in memory)."""
        if not result.invocation_id:
            return
        self._keep(result, len(payload))
        self._trim()
        if self._db is None:
            return
        self._unwritten.append((result.invocation_id, payload))
        written = self._written
        if written is None:
            loop = asyncio.get_running_loop()
            written = self._written = loop.create_future()
            loop.call_soon(self._write_unwritten)
        # Shielded: a cancelled caller must not cancel the others' write.
        await asyncio.shield(written)

    def close(self) -> None:
        self._write_unwritten()
        self._delete(list(self._dropped))
        self._close()

    def _write_unwritten(self) -> None:
        rows, self._unwritten = self._unwritten, []
        written, self._written = self._written, None
        try:
            if rows:
                self._write(rows)
        finally:
            if written is not None and not written.done():
                written.set_result(None)

    def _write(self, rows: list[tuple[str, bytes]]) -> None:
        """Insert ``rows`` in one transaction, with the deletions due; a failed write leaves the
        record in memory only from then on."""
        if self._db is None:
            return
        for invocation_id, _ in rows:  # kept again after it went: not to be deleted now
            if invocation_id in self._results:
                self._dropped.pop(invocation_id, None)
        try:
            if len(rows) == 1 and len(self._dropped) < DELETE_BATCH:
                self._db.execute(_INSERT, rows[0])  # autocommit: one statement, one commit
                return
            with self._db:  # one transaction (the connection is in autocommit mode otherwise)
                self._db.execute("BEGIN")
                self._db.executemany(_INSERT, rows)
                if len(self._dropped) >= DELETE_BATCH:
                    self._delete_rows(list(self._dropped))
                    self._dropped.clear()
        except sqlite3.Error as exc:
            log.warning("invocation record write failed (%s): kept in memory only from now", exc)
            self._close()

    def _keep(self, result: InvokeResultV1, size: int) -> None:
        previous = self._results.pop(result.invocation_id, None)
        if previous is not None:
            self._bytes -= previous[1]
        self._results[result.invocation_id] = (result, size)
        self._bytes += size

    def _trim(self) -> None:
        """Drop the oldest results beyond the bounds; their rows go with the next write."""
        while self._results and (len(self._results) > self.max_count or self._bytes > self.max_bytes):
            invocation_id, (_, size) = self._results.popitem(last=False)
            self._bytes -= size
            self._dropped[invocation_id] = None

    def _delete(self, ids: list[str]) -> None:
        if self._db is None or not ids:
            return
        try:
            with self._db:
                self._db.execute("BEGIN")
                self._delete_rows(ids)
        except sqlite3.Error as exc:
            log.warning("invocation record write failed (%s): kept in memory only from now", exc)
            self._close()
        else:
            for invocation_id in ids:
                self._dropped.pop(invocation_id, None)

    def _delete_rows(self, ids: list[str]) -> None:
        assert self._db is not None
        self._db.executemany("DELETE FROM finished WHERE invocation_id = ?", [(i,) for i in ids])

    def _close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
