"""The inline SQLite driver (controlplane/store/inline_sqlite.py) on a real SQLite file: busy
waits are the loop's sleeps (no deadlock between two sessions of one loop, the loop keeps
turning), a lock held too long is the store's "unavailable", and a commit whose caller was
cancelled still lands without the connection being used by two threads at once."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest
from sqlalchemy import text

from controlplane.errors import StoreUnavailableError
from controlplane.store import inline_sqlite
from controlplane.store.db import normalize_url, sqlite_url
from controlplane.store.store import Store


@pytest.fixture
async def store(tmp_path):
    opened = await Store.open(sqlite_url(tmp_path / "inline.db"))
    async with opened.session() as s:
        await s.execute(text("CREATE TABLE t (x INTEGER)"))
    yield opened
    await opened.close()


def _rows(store: Store) -> list[int]:
    """What a plain sqlite3 connection (another reader) sees: what was committed."""
    path = store.engine.url.database
    with sqlite3.connect(path) as conn:
        return sorted(x for (x,) in conn.execute("SELECT x FROM t"))


def test_plain_sqlite_urls_get_the_inline_driver_and_aiosqlite_stays_selectable():
    assert normalize_url("sqlite:///x.db") == "sqlite+inline:///x.db"
    assert normalize_url("sqlite+aiosqlite:///x.db") == "sqlite+aiosqlite:///x.db"


async def test_the_store_runs_on_the_inline_driver(store):
    assert store.engine.dialect.driver == "inline"
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (1)"))
    assert _rows(store) == [1]


async def test_a_writer_waits_for_another_sessions_lock_while_the_loop_keeps_turning(store):
    holding = asyncio.Event()
    ticks = 0

    async def holder() -> None:
        async with store.session() as s:
            await s.execute(text("INSERT INTO t VALUES (1)"))  # takes SQLite's write lock
            holding.set()
            await asyncio.sleep(0.3)  # other tasks of this loop run meanwhile

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    async def second_writer() -> None:
        await holding.wait()
        async with store.session() as s:
            await s.execute(text("INSERT INTO t VALUES (2)"))  # busy until the holder commits

    tick_task = asyncio.create_task(ticker())
    try:
        await asyncio.wait_for(asyncio.gather(holder(), second_writer()), timeout=10)
    finally:
        tick_task.cancel()
    assert _rows(store) == [1, 2]
    assert ticks >= 10  # the loop was not blocked in SQLite's busy handler


async def test_a_lock_held_past_the_busy_wait_is_the_store_being_unavailable(store, monkeypatch):
    monkeypatch.setattr(inline_sqlite, "BUSY_WAIT_S", 0.2)
    other = sqlite3.connect(store.engine.url.database, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
    try:
        with pytest.raises(StoreUnavailableError, match="database is locked"):
            async with store.session() as s:
                await asyncio.wait_for(s.execute(text("INSERT INTO t VALUES (3)")), timeout=10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    async with store.session() as s:  # and it writes again once the lock is free
        await s.execute(text("INSERT INTO t VALUES (4)"))
    assert _rows(store) == [4]


async def test_a_commit_whose_caller_was_cancelled_lands_and_the_connection_serves_again(store, monkeypatch):
    monkeypatch.setattr(inline_sqlite, "COMMITS", inline_sqlite.CommitPace(inline_under_s=0.0))
    inline_sqlite.COMMITS.took(0.0)  # as after a slow commit: commits go to the worker thread
    gate = threading.Event()
    inline_sqlite._commit_thread().submit(gate.wait, 10)  # the commit thread is busy for now

    async def write() -> None:
        async with store.session() as s:
            await s.execute(text("INSERT INTO t VALUES (5)"))

    task = asyncio.create_task(write())
    await asyncio.sleep(0.1)  # it waits for its commit's turn
    task.cancel()
    await asyncio.sleep(0.05)
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    for x in (6, 7):  # the pool hands its connection(s) out again: no use from two threads
        async with store.session() as s:
            await s.execute(text(f"INSERT INTO t VALUES ({x})"))
    assert _rows(store) == [5, 6, 7]


async def test_a_statement_with_many_rows_runs_in_the_worker_thread_and_lands_whole(store, monkeypatch):
    threads: list[str] = []
    real = inline_sqlite._Connection.in_thread

    async def noted(self, call, *args):
        threads.append(getattr(call, "__name__", repr(call)))
        return await real(self, call, *args)

    monkeypatch.setattr(inline_sqlite._Connection, "in_thread", noted)
    rows = [{"x": n} for n in range(inline_sqlite.THREADED_ROWS * 3)]
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (:x)"), rows)
        await s.execute(text("INSERT INTO t VALUES (:x)"), [{"x": -1}, {"x": -2}])  # a few: inline
    assert _rows(store) == sorted([-2, -1, *range(inline_sqlite.THREADED_ROWS * 3)])
    assert any("executemany" in name for name in threads)  # the big one went to the thread
    assert sum("executemany" in name for name in threads) == 1  # the small one did not


async def test_commits_run_inline_while_fast_and_in_the_thread_after_a_slow_one(store, monkeypatch):
    pace = inline_sqlite.CommitPace(inline_under_s=10.0, threaded_for_s=0.3)
    monkeypatch.setattr(inline_sqlite, "COMMITS", pace)
    threads: list[str] = []
    real = inline_sqlite._Connection.in_thread

    async def noted(self, call, *args):
        threads.append(getattr(call, "__name__", repr(call)))
        return await real(self, call, *args)

    monkeypatch.setattr(inline_sqlite._Connection, "in_thread", noted)
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (1)"))
    assert (pace.inline, pace.threaded, threads) == (1, 0, [])  # fast: no hop
    pace.inline_under_s = 0.0  # from now on every commit counts as slow
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (2)"))
    assert (pace.inline, pace.threaded) == (2, 0)  # that one was inline, and slow ...
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (3)"))
    assert (pace.inline, pace.threaded) == (2, 1)  # ... so the next one went to the thread
    assert threads == ["commit"]
    pace.inline_under_s = 10.0
    await asyncio.sleep(0.35)  # the threaded spell is over: the next commit is tried inline again
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (4)"))
    assert (pace.inline, pace.threaded) == (3, 1)
    assert _rows(store) == [1, 2, 3, 4]


async def test_a_transaction_with_a_threaded_statement_commits_in_the_thread(store, monkeypatch):
    pace = inline_sqlite.CommitPace(inline_under_s=10.0)
    monkeypatch.setattr(inline_sqlite, "COMMITS", pace)
    rows = [{"x": n} for n in range(inline_sqlite.THREADED_ROWS)]
    async with store.session() as s:
        await s.execute(text("INSERT INTO t VALUES (:x)"), rows)
    assert (pace.inline, pace.threaded) == (0, 1)
    async with store.session() as s:  # the next small one is inline again
        await s.execute(text("INSERT INTO t VALUES (-1)"))
    assert (pace.inline, pace.threaded) == (1, 1)
    assert len(_rows(store)) == inline_sqlite.THREADED_ROWS + 1
