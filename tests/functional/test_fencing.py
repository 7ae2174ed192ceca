"""Fencing on a shared PostgreSQL store: once another hub has claimed the next generation, the
old leader's writes roll back, including a transaction it had begun (and checked) before."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from controlplane.coordination.fencing import FencedError, claim_leadership, current_leader
from controlplane.store.models import ClusterRow
from controlplane.store.store import Store


async def _fenced_store(url: str, hub_id: str) -> tuple[Store, object]:
    from controlplane.coordination.fencing import check_in_transaction

    store = await Store.open(url)
    fence = await claim_leadership(store.engine, hub_id=hub_id, api_url=f"http://{hub_id}:8080")
    store.commit_check = lambda session: check_in_transaction(session, fence)
    return store, fence


def _cluster(name: str) -> ClusterRow:
    return ClusterRow(name=name, region="r", status="Unknown", config={}, updated_at=time.time())


async def test_the_old_leaders_writes_roll_back_once_a_new_leader_claims(postgres_url):
    old, old_fence = await _fenced_store(postgres_url, "hub-a")
    new = None
    try:
        async with old.session() as s:
            s.add(_cluster("before"))
        new, new_fence = await _fenced_store(postgres_url, "hub-b")
        assert (old_fence.generation, new_fence.generation) == (1, 2)
        leader = await current_leader(new.engine)
        assert leader is not None and (leader.hub_id, leader.api_url) == ("hub-b", "http://hub-b:8080")

        with pytest.raises(FencedError, match="generation 1, the store's 2") as fenced:
            async with old.session() as s:
                s.add(_cluster("after"))
        assert fenced.value.http_status == 503 and fenced.value.headers["Retry-After"] == "2"
        assert old_fence.fenced.is_set()
        async with old.session() as s:  # reads still work: only writes are fenced
            names = set(await s.scalars(select(ClusterRow.name)))
        assert names == {"before"}
        async with new.session() as s:
            s.add(_cluster("by-new"))
        assert not new_fence.fenced.is_set()
    finally:
        await old.close()
        if new is not None:
            await new.close()


async def test_a_claim_ends_a_frozen_leaders_checked_transaction_and_it_never_commits(postgres_url):
    """The old leader checked its generation (holding the row FOR SHARE) and froze before its
    commit: the new leader's claim waits, ends that backend, and takes over; the write is gone."""
    old, _ = await _fenced_store(postgres_url, "hub-a")
    new = None
    try:
        checked = asyncio.Event()
        resume = asyncio.Event()

        async def frozen_write() -> None:
            async with old.engine.connect() as conn:
                trans = await conn.begin()
                await conn.execute(text("SELECT generation FROM hub_leadership WHERE id = 1 FOR SHARE"))
                await conn.execute(
                    text(
                        "INSERT INTO clusters (name, region, status, config, updated_at) "
                        "VALUES ('frozen', 'r', 'Unknown', '{}', 0)"
                    )
                )
                checked.set()
                await resume.wait()  # "frozen" between its check and its commit
                await trans.commit()

        task = asyncio.create_task(frozen_write())
        await asyncio.wait_for(checked.wait(), 5)
        started = time.monotonic()
        new, fence = await _fenced_store(postgres_url, "hub-b")
        assert fence.generation == 2
        assert time.monotonic() - started < 10
        resume.set()
        with pytest.raises(DBAPIError):  # its backend was ended: the commit fails, whatever the wording
            await asyncio.wait_for(task, 10)
        async with new.session() as s:
            assert "frozen" not in set(await s.scalars(select(ClusterRow.name)))
    finally:
        await old.close()
        if new is not None:
            await new.close()
