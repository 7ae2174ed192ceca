"""The audit trail of API calls, written off the request path in group commits.

Every mutating call by an authenticated caller leaves an ``ApiCall`` event. Writing it in a
transaction of its own before the answer went out cost every POST a second commit. Here a call's
event joins a queue and the caller is answered at once; one task writes what queued meanwhile in
one transaction (up to ``BATCH`` events). ``GET /v1/events`` waits for the queue to be written
first (:meth:`AuditLog.written`), so a caller reads its own calls back as before.

What it does not promise: an event still queued when the process is killed outright is lost (at
most one batch's wait, milliseconds); a store that cannot write keeps them queued and retried every
``RETRY_S`` up to ``MAX_QUEUED``, beyond which the oldest are dropped, counted in ``dropped`` and
logged. A clean stop (:meth:`close`) writes what is queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from controlplane.errors import StoreUnavailableError
from controlplane.store.store import Store

__all__ = ["BATCH", "MAX_QUEUED", "RETRY_S", "AuditLog"]

log = logging.getLogger("edgeplane.audit")

BATCH = 512
MAX_QUEUED = 20_000
RETRY_S = 1.0


class AuditLog:
    """Queues audit events for ``store`` and writes them in batches; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dropped = 0
        self._queue: list[tuple[str, str, str, str, dict[str, Any]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    def record(self, kind: str, object_kind: str, object_id: str, message: str, data: dict[str, Any]) -> None:
        """Queue one event; it is written soon, in a transaction with the others queued meanwhile."""
        self._queue.append((kind, object_kind, object_id, message, data))
        if len(self._queue) > MAX_QUEUED:
            over = len(self._queue) - MAX_QUEUED
            del self._queue[:over]
            self.dropped += over
            log.error("audit queue full (the store does not take writes): %d oldest event(s) dropped", over)
        if not self._closed and (self._writer is None or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(self._write(), name="audit-writer")

    async def written(self) -> None:
        """Return once every event queued before this call is written (or the store refused)."""
        writer = self._writer
        if writer is not None and not writer.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(writer)

    async def _write(self) -> None:
        while self._queue:
            batch = self._queue[:BATCH]
            del self._queue[:BATCH]
            try:
                async with self.store.session() as s:
                    for kind, object_kind, object_id, message, data in batch:
                        Store.add_event(s, kind, object_kind, object_id, message, data)
            except StoreUnavailableError as exc:
                if self._closed:
                    lost = len(batch) + len(self._queue)
                    log.error("could not write %d audit event(s) before stopping: %s", lost, exc)
                    self.dropped += lost
                    self._queue.clear()
                    return
                self._queue[:0] = batch  # first again, in their order
                log.warning("audit events wait for the store (%s): %d queued", exc, len(self._queue))
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:
                # Not the store being away: these rows would fail again. Logged and dropped.
                log.exception("could not record %d audit event(s)", len(batch))
                self.dropped += len(batch)

    async def close(self) -> None:
        """Write what is queued (a store that is away: dropped and logged), then take no more tasks."""
        self._closed = True
        if self._queue and (self._writer is None or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(self._write(), name="audit-writer")
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer
