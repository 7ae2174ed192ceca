"""Finished synchronous invocations, kept so that the id every answer names
(``X-Edgeplane-Invocation-Id``) can be looked up at ``/v1/invocations/{id}``, as OpenWhisk keeps
an activation record of a blocking call; and the retention of every finished invocation.

The records are written behind, in one transaction every ``flush_s`` (one multi-row Core insert:
the ORM's unit of work per row would cost more than the invocation), so the invocation path never
waits on the store; until then a lookup finds them in memory. A record waits as the plain column
values, made into a row only if someone looks it up. At most ``max_pending`` wait:
if the store falls behind, the oldest records are dropped (counted, logged), never the caller's
answer delayed. The event is not kept (the caller sent it; it may be large), the result is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any, Protocol, cast

from sqlalchemy import Table, delete, insert

from controlplane.serverless.outcome import InvocationOutcome
from controlplane.store.models import InvocationRow
from controlplane.store.store import Store

__all__ = ["InvocationHistory", "StoreHolder", "finished_row", "finished_values"]

log = logging.getLogger("edgeplane.hub.functions")

_TABLE = cast(Table, InvocationRow.__table__)


class StoreHolder(Protocol):
    """The hub, as far as the history needs it (read when used: the hub opens its store late)."""

    @property
    def store(self) -> Store: ...


class InvocationHistory:
    def __init__(
        self,
        hub: StoreHolder,
        counters: Counter[str],
        *,
        flush_s: float = 0.5,
        retention_s: float = 86400.0,
        max_pending: int = 10_000,
        expire_every_s: float = 60.0,
    ) -> None:
        self.hub = hub
        self.counters = counters
        self.flush_s = flush_s
        self.retention_s = retention_s
        self.max_pending = max_pending
        self.expire_every_s = expire_every_s
        self._pending: dict[str, dict[str, Any]] = {}  # id -> the row's column values
        self._failing = False  # the last flush failed (logged once until one succeeds)

    def add(self, outcome: InvocationOutcome, started_at: float) -> None:
        """Keep a finished synchronous invocation (written at the next flush)."""
        if len(self._pending) >= self.max_pending:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self.counters["invocation_records_dropped"] += 1
            if self.counters["invocation_records_dropped"] == 1:
                log.warning("invocation records are not written as fast as they come: dropping the oldest")
        # The values now: the caller may still change the outcome (the API turns a result it
        # cannot answer into an error) but the record is what the invocation came to.
        self._pending[outcome.invocation_id] = finished_values(outcome, created_at=started_at)

    def pending(self, invocation_id: str) -> InvocationRow | None:
        """A record not written yet, or None."""
        values = self._pending.get(invocation_id)
        return InvocationRow(**values) if values is not None else None

    async def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = list(self._pending.values()), {}
        try:
            async with self.hub.store.session() as s:
                await s.execute(insert(_TABLE), rows)
        except Exception as exc:  # the store is away: keep them for the next flush (bounded by add)
            if not self._failing:  # once per outage, not every flush
                log.warning("%d invocation record(s) not written yet: %s", len(rows), exc)
            self._failing = True
            self._pending = {**{r["id"]: r for r in rows}, **self._pending}
        else:
            if self._failing:
                log.info("invocation records written again (%d waited)", len(rows))
            self._failing = False

    async def expire(self, now: float | None = None) -> int:
        """Delete finished invocations older than the retention; how many went."""
        cutoff = (time.time() if now is None else now) - self.retention_s
        async with self.hub.store.session() as s:
            result = await s.execute(
                delete(InvocationRow).where(
                    InvocationRow.finished_at.is_not(None), InvocationRow.finished_at < cutoff
                )
            )
        return int(getattr(result, "rowcount", 0) or 0)

    async def loop(self) -> None:
        """Flush every ``flush_s`` and expire every ``expire_every_s`` until cancelled."""
        last_expiry = 0.0
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()
            if time.monotonic() - last_expiry >= self.expire_every_s:
                last_expiry = time.monotonic()
                try:
                    expired = await self.expire()
                except Exception as exc:
                    log.warning("finished invocations not expired: %s", exc)
                else:
                    if expired:
                        log.info("%d finished invocation(s) past their retention deleted", expired)


def finished_values(outcome: InvocationOutcome, *, created_at: float) -> dict[str, Any]:
    """A finished invocation's column values (its event is not kept), finished now."""
    return {
        "id": outcome.invocation_id,
        "function": outcome.function,
        "version": outcome.version,
        "status": "Succeeded" if outcome.ok else "Failed",
        "node": outcome.node,
        "cold_start": outcome.cold_start,
        "event": {},
        "result": {"value": outcome.result},
        "error": outcome.error or {},
        "timings": outcome.timings(),
        "created_at": created_at,
        "finished_at": time.time(),
        "idempotency_key": None,
    }


def finished_row(outcome: InvocationOutcome, *, created_at: float) -> InvocationRow:
    """A finished invocation as a row (its event is not kept), finished now."""
    return InvocationRow(**finished_values(outcome, created_at=created_at))
