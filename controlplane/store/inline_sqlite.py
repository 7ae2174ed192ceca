"""SQLite for the hub's event loop: statements run on the loop's thread, commits in a worker.

SQLAlchemy's ``aiosqlite`` driver hands every call (begin, execute, fetch, cursor close, commit)
to a thread of its own and waits for the answer: a hop costs about 0.14 ms on the 2-core bench
machine, a session makes ten or more, and ``SELECT 1`` in a transaction took 1.7 ms where SQLite
itself needs microseconds. Here the statements run inline, through SQLAlchemy's own adapter for
aiosqlite (the same SQL, types and errors), and so does ``commit`` while commits are fast
(:class:`CommitPace`): a commit waits for ``fsync``, about 0.1 ms on the bench machine's disk,
where a hop to a worker thread and back costs 1.5-2 ms after an idle spell (both sides asleep).
After a commit slower than :data:`CommitPace.inline_under_s` (a slow disk, a WAL checkpoint),
commits go to the worker thread for :data:`CommitPace.threaded_for_s`, so that the loop serves
others meanwhile; a statement with many rows (:data:`THREADED_ROWS`) runs there too, and so does
its transaction's commit.

Two things change because a statement no longer waits in a thread:

* **Busy waits are the loop's, not the thread's.** A write that finds another connection holding
  SQLite's write lock (``SQLITE_BUSY``) must not block the loop's thread, or the holder, a session
  of this same loop, could never finish: the deadlock SQLite's ``busy_timeout`` would cause here.
  The connection's own busy timeout is 0 and the wait is the loop's: until a transaction of this
  process ends (the usual holder), or a backoff (0.5 to 20 ms) where another process holds the
  lock, retried for up to :data:`BUSY_WAIT_S` (the ``busy_timeout`` used before), then raised.
* **A long statement holds the loop.** Every statement of the hub is an indexed lookup or a batch
  bounded by its caller; the same statement in aiosqlite's thread held the GIL for most of its
  run anyway (rows are built as Python objects).

``sqlite+inline://`` names this driver (``sqlite://`` maps to it); ``sqlite+aiosqlite://`` still
selects aiosqlite.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)

__all__ = ["BUSY_WAIT_S", "COMMITS", "CommitPace", "InlineSQLiteDialect"]

BUSY_WAIT_S = 30.0
# A statement with this many rows or more runs in the worker thread: a fleet's batch of telemetry
# rows must not hold the loop (sqlite3 lets go of the GIL while SQLite works).
THREADED_ROWS = 64
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, 261})  # SQLITE_BUSY, SQLITE_BUSY_RECOVERY
_FIRST_BACKOFF_S = 0.0005
_MAX_BACKOFF_S = 0.02

T = TypeVar("T")

_committer: concurrent.futures.ThreadPoolExecutor | None = None


class CommitPace:
    """Where this process's commits run: inline on the loop while they take under
    ``inline_under_s``, in the worker thread for ``threaded_for_s`` after one that did not; then
    the next one is tried inline again (a threaded commit's own time is no measure: it includes
    its waits for the GIL while the loop runs). At worst one slow commit per ``threaded_for_s``
    holds the loop, for as long as that ``fsync`` or checkpoint takes."""

    def __init__(self, *, inline_under_s: float = 0.005, threaded_for_s: float = 5.0) -> None:
        self.inline_under_s = inline_under_s
        self.threaded_for_s = threaded_for_s
        self._threaded_until = float("-inf")
        self.inline = 0  # commits made inline, and in the thread (for tests and benches)
        self.threaded = 0

    def go_inline(self) -> bool:
        return time.monotonic() >= self._threaded_until

    def took(self, seconds: float) -> None:
        """A commit took ``seconds`` (inline or in the thread)."""
        if seconds >= self.inline_under_s:
            self._threaded_until = time.monotonic() + self.threaded_for_s


COMMITS = CommitPace()


def _commit_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread every engine of this process commits in (SQLite has one writer anyway)."""
    global _committer
    if _committer is None:
        _committer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite-commit")
    return _committer


def _busy(exc: sqlite3.OperationalError) -> bool:
    # SQLITE_BUSY_SNAPSHOT (517) is not retried: only a new transaction sees the newer snapshot.
    return getattr(exc, "sqlite_errorcode", None) in _BUSY_CODES


async def _until_not_busy(attempt: Callable[[], Awaitable[T]]) -> T:
    """``await attempt()``; while SQLite answers busy, wait (:func:`_lock_released`) and try
    again, for up to :data:`BUSY_WAIT_S`."""
    backoff = _FIRST_BACKOFF_S
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            return await attempt()
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
        await _lock_released(backoff)
        backoff = min(backoff * 2, _MAX_BACKOFF_S)


async def _retrying(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` on the loop's thread, retried while SQLite answers busy."""

    async def once() -> T:
        return call(*args)

    return await _until_not_busy(once)


# Writers of this process waiting for SQLite's write lock: woken as soon as a transaction of this
# process ends (the usual holder), else after their backoff (another process holds it).
_waiting: list[asyncio.Future[None]] = []


async def _lock_released(timeout_s: float) -> None:
    released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    _waiting.append(released)
    try:
        await asyncio.wait_for(released, timeout_s)
    except TimeoutError:
        pass
    finally:
        with contextlib.suppress(ValueError):
            _waiting.remove(released)


def _wake_writers(_: object) -> None:
    _transaction_ended()


def _transaction_ended() -> None:
    while _waiting:
        released = _waiting.pop()
        if not released.done():
            with contextlib.suppress(RuntimeError):  # its loop is gone
                released.set_result(None)


class _Cursor:
    """An aiosqlite-shaped cursor whose coroutines do their work without suspending, but for a
    statement with many rows (see :data:`THREADED_ROWS`)."""

    def __init__(self, cursor: sqlite3.Cursor, connection: _Connection) -> None:
        self._cursor = cursor
        self._connection = connection

    async def __aenter__(self) -> _Cursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> _Cursor:
        await _retrying(self._cursor.execute, sql, parameters if parameters is not None else ())
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> _Cursor:
        rows = parameters if isinstance(parameters, Sequence) else list(parameters)  # retried whole
        if len(rows) >= THREADED_ROWS:
            self._connection._many = True
            await self._connection.in_thread(self._cursor.executemany, sql, rows)
        else:
            await _retrying(self._cursor.executemany, sql, rows)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(size if size is not None else self._cursor.arraysize)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    async def setinputsizes(self, *sizes: Any) -> None:
        return None

    async def __aiter__(self) -> AsyncIterator[Any]:
        while (row := self._cursor.fetchone()) is not None:
            yield row


class _Connection:
    """An aiosqlite-shaped connection over one ``sqlite3`` connection: statements inline,
    ``commit`` inline or in the driver's worker thread (:class:`CommitPace`)."""

    def __init__(self, conn: sqlite3.Connection, committer: concurrent.futures.Executor) -> None:
        self._conn = conn
        self._connection: sqlite3.Connection | None = conn  # SQLAlchemy's adapter tests it
        self._committer = committer
        self._threaded: asyncio.Future[None] | None = None
        self._many = False  # the open transaction ran a statement in the thread: so does its commit

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> _Cursor:
        return _Cursor(self._conn.cursor(), self)

    async def execute(self, sql: str, parameters: Any = ()) -> _Cursor:
        return await self.cursor().execute(sql, parameters)

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    async def commit(self) -> None:
        if not self._conn.in_transaction:
            self._many = False
            return  # nothing to make durable: no hop
        if self._many or not COMMITS.go_inline():
            self._many = False
            COMMITS.threaded += 1
            await self.in_thread(self._conn.commit)
            return
        COMMITS.inline += 1
        try:
            await _retrying(self._timed_commit)
        finally:
            _transaction_ended()

    def _timed_commit(self) -> None:
        began = time.perf_counter()
        try:
            self._conn.commit()
        finally:
            COMMITS.took(time.perf_counter() - began)

    async def in_thread(self, call: Callable[..., Any], *args: Any) -> None:
        """``call(*args)`` in the driver's worker thread, retried while SQLite answers busy;
        every transaction end wakes the writers waiting for the lock."""
        loop = asyncio.get_running_loop()

        async def once() -> None:
            # Shielded: a cancelled caller must not leave the thread using the connection while
            # the loop rolls it back; the next call on it waits for the thread instead.
            self._threaded = loop.run_in_executor(self._committer, functools.partial(call, *args))
            self._threaded.add_done_callback(_wake_writers)
            await asyncio.shield(self._threaded)

        await _until_not_busy(once)

    async def _settled(self) -> None:
        """Wait for a threaded call a cancelled caller left running (its outcome is the caller's)."""
        committing, self._threaded = self._threaded, None
        if committing is not None and not committing.done():
            await asyncio.wait([committing])

    async def rollback(self) -> None:
        await self._settled()
        self._many = False
        try:
            self._conn.rollback()
        finally:
            _transaction_ended()

    async def close(self) -> None:
        await self._settled()
        self._connection = None
        self._conn.close()

    def stop(self) -> None:
        """Close at once (SQLAlchemy's terminate of an invalidated connection)."""
        self._connection = None
        self._conn.close()


class _AdaptedConnection(AsyncAdapt_aiosqlite_connection):
    __slots__ = ()

    @property
    def isolation_level(self) -> str | None:
        return self._connection.isolation_level  # type: ignore[no-any-return]

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        self._connection._conn.isolation_level = value


class _InlineModule:
    """What SQLAlchemy's adapter reads of the ``aiosqlite`` module."""

    Connection = _Connection

    def __getattr__(self, name: str) -> Any:
        return getattr(sqlite3, name)  # errors, sqlite_version


class _InlineDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def __init__(self) -> None:
        super().__init__(_InlineModule(), sqlite3)  # type: ignore[arg-type]

    def connect(self, *args: Any, **kwargs: Any) -> _AdaptedConnection:  # type: ignore[override]
        kwargs.pop("async_creator_fn", None)
        kwargs["timeout"] = 0  # busy waits are asyncio sleeps (see the module docstring)
        kwargs["check_same_thread"] = False  # commits run in the worker thread
        try:
            conn = sqlite3.connect(*args, **kwargs)
        except Exception as error:
            self._handle_exception_no_connection(error)
        return _AdaptedConnection(self, _Connection(conn, _commit_thread()))  # type: ignore[arg-type]


class InlineSQLiteDialect(SQLiteDialect_aiosqlite):
    """``sqlite+inline``: SQLAlchemy's aiosqlite dialect over :class:`_InlineDBAPI`."""

    driver = "inline"
    supports_statement_cache = True

    @classmethod
    def import_dbapi(cls) -> _InlineDBAPI:  # type: ignore[override]
        return _InlineDBAPI()

    def retrieve_dbapi_version(self, dbapi: Any) -> Any:
        return None


registry.register("sqlite.inline", __name__, "InlineSQLiteDialect")
