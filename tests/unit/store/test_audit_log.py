"""The API's audit trail written off the request path: every queued event lands once, in order,
in group commits; a store that refuses writes keeps them queued until it takes them again."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select

from controlplane.api import audit
from controlplane.api.audit import AuditLog
from controlplane.errors import StoreUnavailableError
from controlplane.store.models import EventRow
from controlplane.store.store import Store


class _FlakyStore(Store):
    """The real store, whose next ``fail`` transactions are refused as a store that is away."""

    fail = 0
    transactions = 0

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator:  # type: ignore[override]
        self.transactions += 1
        if self.fail > 0:
            self.fail -= 1
            raise StoreUnavailableError("database is locked")
        async with super().session() as s:
            yield s


async def _stored(store: Store) -> list[str]:
    async with store.session() as s:
        return list(await s.scalars(select(EventRow.object_id).order_by(EventRow.id)))


@pytest.fixture
async def store(tmp_path) -> AsyncIterator[_FlakyStore]:
    opened = await Store.open(f"sqlite:///{tmp_path / 'audit.db'}")
    flaky = _FlakyStore(opened.engine)
    try:
        yield flaky
    finally:
        await opened.close()


async def test_every_event_is_written_once_in_order_in_a_few_transactions(store):
    log = AuditLog(store)
    for i in range(1200):
        log.record("ApiCall", "token", f"t{i}", "POST /v1/workloads -> 201", {"i": i})
    await log.written()
    assert store.transactions == 3  # 512 + 512 + 176
    assert await _stored(store) == [f"t{i}" for i in range(1200)]
    assert log.dropped == 0


async def test_a_store_that_is_away_keeps_the_events_queued_until_it_writes_again(store, monkeypatch):
    monkeypatch.setattr(audit, "RETRY_S", 0.01)
    store.fail = 3
    log = AuditLog(store)
    for i in range(5):
        log.record("ApiCall", "token", f"t{i}", "", {})
    await log.written()
    assert await _stored(store) == [f"t{i}" for i in range(5)]
    assert log.dropped == 0


async def test_close_writes_what_is_queued_and_counts_what_a_store_away_loses(store):
    log = AuditLog(store)
    log.record("ApiCall", "token", "kept", "", {})
    await log.close()
    assert await _stored(store) == ["kept"]
    late = AuditLog(store)
    store.fail = 10
    late.record("ApiCall", "token", "lost", "", {})
    await late.close()
    assert late.dropped == 1
    store.fail = 0
    async with store.session() as s:
        assert await s.scalar(select(func.count(EventRow.id))) == 1
