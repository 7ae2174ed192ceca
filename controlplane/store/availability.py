"""Whether the store can take writes: which errors mean "the store is away" (not "this request is
wrong"), and the store's memory of its last failed write.

A store is *unavailable* when the database cannot be reached (connection refused, reset,
invalidated; PostgreSQL shutting down or starting up), when it cannot write (a full disk, a
read-only database, a disk I/O error) or when SQLite's write lock was not granted within its busy
timeout. Those errors are worth retrying and are answered 503 (``controlplane/api/errors.py``);
every other database error is a bug and stays a 500.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

__all__ = ["WriteHealth", "from_database", "is_unavailable", "short_reason"]

# SQLite's messages (sqlite3.OperationalError) for a store that cannot write now.
_SQLITE_UNAVAILABLE = (
    "database is locked",
    "disk i/o error",
    "database or disk is full",
    "attempt to write a readonly database",
    "unable to open database file",
)
# asyncpg's errors for a server that is away or cannot write (matched by name: asyncpg is only
# there with PostgreSQL).
_ASYNCPG_UNAVAILABLE = frozenset(
    {
        "PostgresConnectionError",
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        "ClientCannotConnectError",
        "ConnectionRejectionError",
        "CannotConnectNowError",
        "AdminShutdownError",
        "CrashShutdownError",
        "TooManyConnectionsError",
        "DiskFullError",
        "ReadOnlySQLTransactionError",
    }
)
# asyncpg's InterfaceError messages about a connection that went away under it.
_CLOSED_CONNECTION = ("connection is closed", "connection was closed", "underlying connection is closed")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, the DBAPI error it wraps and its causes (bounded: chains can loop)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 8:
        item = todo.pop(0)
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [getattr(item, "orig", None), item.__cause__, item.__context__]
    return seen


def _unavailable_one(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, (OSError, PoolTimeoutError)):  # refused, reset, unreachable, no pool slot
        return True
    name = type(exc).__name__
    module = type(exc).__module__
    message = str(exc).lower()
    if module.startswith("asyncpg"):
        return name in _ASYNCPG_UNAVAILABLE or any(m in message for m in _CLOSED_CONNECTION)
    if module.startswith("sqlite3") or name == "OperationalError":
        return any(m in message for m in _SQLITE_UNAVAILABLE)
    return False


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says the store is away or cannot write, not that the
    statement was wrong: such an error is retried, and answered 503 rather than 500."""
    return any(_unavailable_one(e) for e in _chain(exc))


def from_database(exc: BaseException) -> bool:
    """True when ``exc`` or what it wraps is the database layer's (SQLAlchemy, asyncpg, sqlite3),
    so that an ``OSError`` of some other part is not taken for a store outage."""
    return any(
        isinstance(e, SQLAlchemyError) or type(e).__module__.startswith(("asyncpg", "sqlite3"))
        for e in _chain(exc)
    )


def short_reason(exc: BaseException) -> str:
    """One short line naming why the store is unavailable (no statement, no parameters: those
    may hold a tenant's data)."""
    for item in reversed(_chain(exc)):
        if _unavailable_one(item) and not isinstance(item, DBAPIError):
            text = str(item).splitlines()[0] if str(item) else ""
            return f"{type(item).__name__}: {text}"[:160] if text else type(item).__name__
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return "the database connection was lost"
    return type(exc).__name__


@dataclass(slots=True)
class WriteHealth:
    """The store's memory of its writes: when the last one failed (and why) and whether one has
    succeeded since. ``/healthz`` reports the store as down while ``failing``."""

    failed_at: float | None = None
    reason: str = ""
    succeeded_at: float | None = None

    @property
    def failing(self) -> bool:
        """A write failed and none has succeeded since."""
        return self.failed_at is not None

    def failed(self, exc: BaseException) -> None:
        self.failed_at = time.time()
        self.reason = short_reason(exc)

    def succeeded(self) -> None:
        self.failed_at = None
        self.reason = ""
        self.succeeded_at = time.time()
