"""One active hub per store: the lease a hub holds while it runs.

Two hubs on one store would both reconcile, place and dispatch: work would run twice. So
``serve`` and ``up`` take the store's hub lease before they start the hub:

* **SQLite** (the single-hub default): an exclusive ``flock`` on ``<database>.hub.lock``, which
  the kernel drops when the process dies, however it dies. A second hub is refused at once, in
  one line naming the holder's pid and the way to run several hubs.
* **PostgreSQL**: a session advisory lock (``pg_try_advisory_lock``) on a connection of its
  own. A second hub waits as a **standby** (nothing bound, nothing sent) and starts within
  ``poll_s`` of the holder's connection closing: a killed hub's socket closes at once, so the
  standby takes over in about a second. The holder runs a query on that connection every
  ``check_s`` (its renewal); a standby that sees the holder's session silent for longer than
  ``stale_s`` (a frozen or cut-off hub) ends that session (``pg_terminate_backend``) and takes
  the lock. The hub calls :meth:`HubLease.confirm` before each reconcile round: a round runs
  only if the lease connection answered within the last second, so a hub that wakes from a
  freeze finds its session ended and acts on nothing. A failed session (a database outage,
  a standby's takeover) is opened again and the lock asked for again: back, the hub acts
  again; held by another hub, :attr:`lost` is set and the command stops the hub.

Not covered: a hub frozen *inside* a round finishes that round when it wakes (a generation
checked in every write would close that, issue 24). Several hubs serving the API at once is
not this either: a standby serves nothing until it holds the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from controlplane.errors import StartupError

__all__ = ["LEASE_KEY", "HubLease", "acquire_hub_lease", "held_hub_lease"]

log = logging.getLogger("edgeplane.hub")

# pg advisory lock key of the hub lease ("edgeplan" as a 64-bit integer, so it cannot collide
# with another application's small integer keys).
LEASE_KEY = int.from_bytes(b"edgeplan", "big") & 0x7FFF_FFFF_FFFF_FFFF
CONFIRMED_FOR_S = 1.0
REACQUIRE_S = 0.5
"""How long an answer of the lease connection lets the hub act without asking again."""

# The holder of the lease and how long its session has been silent (pg_locks shows a bigint
# advisory key as classid = high 32 bits, objid = low 32 bits, objsubid = 1).
_HOLDER = """
SELECT a.pid, EXTRACT(EPOCH FROM (clock_timestamp() - GREATEST(a.query_start, a.state_change)))
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


class HubLease:
    """A held lease; :meth:`release` (or the process's end) gives it up."""

    def __init__(
        self,
        kind: str,
        *,
        lock_file: Any = None,
        connection: Any = None,
        dsn: str | None = None,
        check_s: float = 2.0,
        stale_s: float = 15.0,
    ) -> None:
        """``connection`` and ``dsn``: the PostgreSQL session holding the lock, and where to
        open another one if it fails."""
        self.kind = kind
        self._file = lock_file
        self._conn = connection
        self._dsn = dsn
        self.lost = asyncio.Event()
        self._lock = asyncio.Lock()  # one query at a time on the lease connection
        self._ok_at = time.monotonic()
        # An answer slower than the lease itself counts as none: a standby may have taken over.
        # (Not shorter: after a short freeze, a timer that expired during it must not stop a hub
        # whose lease no one took.)
        self._answer_within_s = stale_s
        self._watch: asyncio.Task[None] | None = None
        self._relay: asyncio.Task[None] | None = None
        if connection is not None:
            self._watch = asyncio.get_running_loop().create_task(self._check(check_s))

    async def _renew(self) -> bool:
        """One query on the lease connection (the holder's sign of life a standby reads). False
        once it fails: the lock went with the session, and until :meth:`_reacquire` gets it back
        this hub acts on nothing."""
        async with self._lock:
            if self.lost.is_set() or self._conn is None:
                return False
            try:
                await asyncio.wait_for(self._conn.fetchval("SELECT 1"), timeout=self._answer_within_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "the hub lease's database session failed (%s): this hub acts on nothing until it "
                    "holds the lease again",
                    exc,
                )
                conn, self._conn = self._conn, None
                with contextlib.suppress(Exception):
                    conn.terminate()
                return False
            self._ok_at = time.monotonic()
            return True

    async def _reacquire(self) -> None:
        """A new session and the lock again, or :attr:`lost` if another hub holds it now (a
        database still away: tried again next time)."""
        assert self._dsn is not None
        conn = None
        try:
            conn = await _connect(self._dsn, self._answer_within_s)
            held = await _try_lock(conn, self._answer_within_s)
        except asyncio.CancelledError:
            if conn is not None:
                conn.terminate()
            raise
        except Exception:
            if conn is not None:
                conn.terminate()
            return
        if not held:
            conn.terminate()
            log.critical("another hub holds the store's lease now: this hub stops")
            self.lost.set()
            return
        async with self._lock:
            self._conn = conn
            self._ok_at = time.monotonic()
        log.warning("the hub lease is held again: this hub acts again")

    async def _check(self, every_s: float) -> None:
        while not self.lost.is_set():  # until another hub has the lease (or it is released)
            if self._conn is not None:
                await self._renew()
            else:
                await self._reacquire()
            # Without a session, asked again sooner than a standby polls: back from a database
            # outage, the hub that held the lease is the likelier to get it again.
            await asyncio.sleep(every_s if self._conn is not None else REACQUIRE_S)

    async def confirm(self) -> bool:
        """Whether this hub may act now: the lease connection answered within the last second
        (after a freeze the monotonic clock has moved on, so this asks the database again)."""
        if self.lost.is_set():
            return False
        if self._dsn is None:  # SQLite: the lock lives as long as this process
            return True
        if self._conn is not None and time.monotonic() - self._ok_at < CONFIRMED_FOR_S:
            return True
        return await self._renew()

    def stop_when_lost(self, stop: asyncio.Event) -> None:
        """Set ``stop`` if the lease is lost (the command's shutdown path then runs as on a signal)."""

        async def relay() -> None:
            await self.lost.wait()
            stop.set()

        self._relay = asyncio.get_running_loop().create_task(relay())

    async def release(self) -> None:
        if self._relay is not None:
            self._relay.cancel()
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), timeout=5)
            self._conn = None
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file, fcntl.LOCK_UN)
                self._file.close()
            self._file = None


def _sqlite_path(url: Any) -> Path | None:
    database = url.database
    if not database or database == ":memory:" or str(database).startswith("file:"):
        return None
    return Path(database).resolve()


def _sqlite_lease(path: Path) -> HubLease:
    lock_path = path.with_name(path.name + ".hub.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path, "a+", encoding="utf-8")  # held open for the hub's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StartupError(
            f"another hub ({holder}) is serving the store {path}: one hub per SQLite store; "
            "to run several, give them one PostgreSQL --database-url (the others wait as standbys)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    handle.flush()
    return HubLease("sqlite", lock_file=handle)


async def _preempt_stale_holder(conn: Any, stale_s: float) -> None:
    """End the holder's session if it has been silent longer than ``stale_s`` (frozen, cut off)."""
    row = await conn.fetchrow(_HOLDER, (LEASE_KEY >> 32) & 0xFFFF_FFFF, LEASE_KEY & 0xFFFF_FFFF)
    if row is None or row[1] is None or float(row[1]) <= stale_s:
        return
    log.warning(
        "the active hub's lease session (backend %s) has been silent for %.1f s (over %.1f s): ending it",
        row[0],
        float(row[1]),
        stale_s,
    )
    await conn.fetchval("SELECT pg_terminate_backend($1)", row[0])


async def _connect(dsn: str, timeout_s: float) -> Any:
    import asyncpg

    return await asyncio.wait_for(asyncpg.connect(dsn), timeout=timeout_s)


async def _try_lock(conn: Any, timeout_s: float) -> bool:
    """The lease's advisory lock for ``conn``'s session, if no other session holds it."""
    return bool(
        await asyncio.wait_for(conn.fetchval("SELECT pg_try_advisory_lock($1)", LEASE_KEY), timeout=timeout_s)
    )


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


async def _postgres_lease(
    dsn: str,
    where: str,
    *,
    poll_s: float,
    check_s: float,
    stale_s: float,
    on_standby: Callable[[], Awaitable[object]] | None,
) -> HubLease:
    """The lock, asked for every ``poll_s`` on one session of the standby's own, which becomes
    the lease's once it holds it; a database that fails meanwhile is one line (StartupError)."""
    said = False
    conn = None
    try:
        conn = await _connect(dsn, 10)
        while not await _try_lock(conn, 10):
            try:
                await asyncio.wait_for(_preempt_stale_holder(conn, stale_s), timeout=10)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no right to read or end the holder's session: wait for it
                log.warning("cannot check the active hub's lease session: %s", exc)
            if not said:
                log.warning(
                    "another hub holds the lease on %s: standing by (checked every %.1f s)", where, poll_s
                )
                print(f"edgeplane hub: standby, another hub is active on {where}", flush=True)
                said = True
                if on_standby is not None:
                    await on_standby()
            await asyncio.sleep(poll_s)
    except BaseException as exc:
        if conn is not None:
            conn.terminate()
        if isinstance(exc, Exception) and not isinstance(exc, StartupError):
            raise StartupError(f"cannot open the store at {where}: {_first_line(exc)}") from None
        raise
    if said:
        log.warning("hub lease acquired on %s: this standby becomes the active hub", where)
    return HubLease("postgresql", connection=conn, dsn=dsn, check_s=check_s, stale_s=stale_s)


async def acquire_hub_lease(
    database_url: str,
    *,
    stale_s: float = 15.0,
    poll_s: float = 1.0,
    check_s: float = 2.0,
    on_standby: Callable[[], Awaitable[object]] | None = None,
) -> HubLease:
    """The store's hub lease: at once on SQLite (or :class:`StartupError` naming the holder),
    after standing by as long as another hub holds it on PostgreSQL (and its session was heard
    from within ``stale_s``; Kubernetes' leader election uses a 15 s lease too). ``on_standby``
    is awaited once, when this hub starts standing by."""
    if not check_s * 2 < stale_s:
        raise ValueError(f"a lease of {stale_s} s needs renewals more often than every {stale_s / 2} s")
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from edgeplane_contract.urls import mask_url

    try:
        url = make_url(database_url)
        backend = url.get_backend_name()
    except ArgumentError as exc:
        raise StartupError(f"cannot open the store at {mask_url(database_url)}: {exc}") from None
    if backend == "sqlite":
        path = _sqlite_path(url)
        return _sqlite_lease(path) if path is not None else HubLease("none")
    if backend == "postgresql":
        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return await _postgres_lease(
            dsn,
            mask_url(database_url),
            poll_s=poll_s,
            check_s=check_s,
            stale_s=stale_s,
            on_standby=on_standby,
        )
    return HubLease("none")


@contextlib.asynccontextmanager
async def held_hub_lease(
    database_url: str,
    *,
    stale_s: float = 15.0,
    on_standby: Callable[[], Awaitable[object]] | None = None,
) -> AsyncIterator[HubLease]:
    """:func:`acquire_hub_lease`, released on the way out (what ``serve`` and ``up`` run in)."""
    lease = await acquire_hub_lease(database_url, stale_s=stale_s, on_standby=on_standby)
    try:
        yield lease
    finally:
        await lease.release()
