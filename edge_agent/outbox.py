"""The agent's outbox: state reports not yet acknowledged by the hub, kept in a small SQLite file
so that they survive an agent restart (a workload that finished while the hub was unreachable
must not be forgotten, or the hub would run it again).

Used like a deque by the agent (``append``, ``[0]``, ``popleft``, ``len``); every change is
written through. Reports are re-sent in order and deduplicated by ``report_id`` at the hub.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sqlite3
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from edgeplane_contract.messages import MessageError, PlacementState, StatusReportV1, decode, encode

from edge_agent.local_db import open_private_db

__all__ = ["FINAL_STATES", "DurableOutbox"]

FINAL_STATES = frozenset({"Succeeded", "Failed", "Cancelled"})

log = logging.getLogger("edgeplane.agent.outbox")


class DurableOutbox:
    """A FIFO of reports mirrored in ``path`` (None: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self._queue: deque[StatusReportV1] = deque()
        self._db: sqlite3.Connection | None = None
        if path is None:
            return
        try:
            self._db = open_private_db(
                path,
                "CREATE TABLE IF NOT EXISTS reports (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "report_id TEXT UNIQUE NOT NULL, body BLOB NOT NULL)",
            )
            stale: list[str] = []
            for report_id, body in self._db.execute("SELECT report_id, body FROM reports ORDER BY seq"):
                try:
                    report = decode(body, StatusReportV1)
                except MessageError as exc:
                    log.warning("dropping an unreadable queued report %s: %s", report_id, exc)
                    stale.append(report_id)
                    continue
                # Only final states outlive the agent: a "Running" of the previous run is no longer
                # true (its processes died with it; what is resumed reports anew).
                if report.placement.state in FINAL_STATES:
                    self._queue.append(report)
                else:
                    stale.append(report_id)
            self._db.executemany("DELETE FROM reports WHERE report_id = ?", [(r,) for r in stale])
        except (sqlite3.Error, OSError) as exc:
            # A broken file must not stop the agent: it keeps working with an in-memory outbox.
            log.warning("outbox %s unusable (%s): reports are kept in memory only", path, exc)
            self._close()
        if self._queue:
            log.info("%d report(s) from before the restart are waiting to be sent", len(self._queue))

    def __len__(self) -> int:
        return len(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def __getitem__(self, index: int) -> StatusReportV1:
        return self._queue[index]

    def append(self, report: StatusReportV1) -> None:
        self._queue.append(report)
        self._write(
            "INSERT OR IGNORE INTO reports (report_id, body) VALUES (?, ?)", report.report_id, encode(report)
        )

    def popleft(self) -> StatusReportV1:
        report = self._queue.popleft()
        self._write("DELETE FROM reports WHERE report_id = ?", report.report_id)
        return report

    def head(self, count: int) -> list[StatusReportV1]:
        """The oldest ``count`` reports (fewer when fewer are queued), left in the outbox."""
        return list(itertools.islice(self._queue, count))

    def remove(self, reports: Sequence[StatusReportV1]) -> None:
        """Take these reports (acknowledged by the hub) out, wherever they are in the queue; one
        write for all of them."""
        if not reports:
            return
        gone = {id(report) for report in reports}
        while self._queue and id(self._queue[0]) in gone:  # the usual case: the oldest, in order
            gone.discard(id(self._queue.popleft()))
        if gone:
            self._queue = deque(report for report in self._queue if id(report) not in gone)
        marks = ", ".join("?" * len(reports))
        self._write(f"DELETE FROM reports WHERE report_id IN ({marks})", *(r.report_id for r in reports))

    def latest_states(self) -> list[PlacementState]:
        """The newest queued state of each placement (what the registration also tells the hub)."""
        newest: dict[str, PlacementState] = {}
        for report in self._queue:
            newest[report.placement.placement_id] = report.placement
        return list(newest.values())

    def close(self) -> None:
        self._close()

    def _write(self, sql: str, *params: object) -> None:
        if self._db is None:
            return
        try:
            self._db.execute(sql, params)
        except sqlite3.Error as exc:
            log.warning("outbox write failed (%s): reports are kept in memory only from now", exc)
            self._close()

    def _close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
