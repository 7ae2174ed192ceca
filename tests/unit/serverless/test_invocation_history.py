"""Finished synchronous invocations: written behind, bounded, expired (a real SQLite store)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from controlplane.serverless.history import InvocationHistory
from controlplane.serverless.outcome import InvocationOutcome
from controlplane.store.db import sqlite_url
from controlplane.store.models import InvocationRow
from controlplane.store.store import Store


def _outcome(invocation_id: str, ok: bool = True) -> InvocationOutcome:
    return InvocationOutcome(
        invocation_id=invocation_id, function="echo", version=1, node="n1", ok=ok, result={"x": 1}
    )


async def test_records_are_found_before_and_after_the_flush_and_expire(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "s.sqlite3"))
    try:
        counters: Counter[str] = Counter()
        history = InvocationHistory(SimpleNamespace(store=store), counters, retention_s=3600, max_pending=2)
        history.add(_outcome("a"), time.time())
        history.add(_outcome("b", ok=False), time.time())
        history.add(_outcome("c"), time.time())  # over max_pending: the oldest goes, counted
        assert history.pending("a") is None and counters["invocation_records_dropped"] == 1
        assert history.pending("c") is not None
        await history.flush()
        assert history.pending("c") is None
        async with store.session() as s:
            b, c = await s.get(InvocationRow, "b"), await s.get(InvocationRow, "c")
        assert b is not None and b.status == "Failed" and c is not None and c.result == {"value": {"x": 1}}
        assert await history.expire(now=time.time() + 1800) == 0
        assert await history.expire(now=time.time() + 7200) == 2
        async with store.session() as s:
            assert await s.get(InvocationRow, "c") is None
    finally:
        await store.close()
