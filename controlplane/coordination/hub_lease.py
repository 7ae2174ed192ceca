"""One active hub per store: the lease a hub holds while it runs.

Two hubs on one store would both reconcile, place and dispatch: work would run twice. So
``serve`` and ``up`` take the store's hub lease before they start the hub:

* **SQLite** (the single-hub default): an exclusive ``flock`` on ``<database>.hub.lock``, which
  the kernel drops when the process dies, however it dies. A second hub is refused at once, in
  one line naming the holder's pid and the way to run several hubs.
* **PostgreSQL**: a session advisory lock (``pg_try_advisory_lock``) on a connection of its
  own. A second hub waits as a **standby** (nothing bound, nothing sent) and starts within
  ``poll_s`` of the holder's connection closing: a killed hub's socket closes at once, so the
  standby takes over in about a second. The holder checks its connection every ``check_s``;
  if it is gone, the lock is gone with it, and :attr:`lost` is set so that the hub stops before
  a standby starts beside it.

Not yet (issue 24): a stopped (``SIGSTOP``) or partitioned holder keeps its session and so its
lock; a time-bound lease with a generation checked in every write (fencing) is the next step.
Several hubs serving the API at once is also not this: the standby serves nothing until it
holds the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Any

from controlplane.errors import StartupError

__all__ = ["LEASE_KEY", "HubLease", "acquire_hub_lease"]

log = logging.getLogger("edgeplane.hub")

# pg advisory lock key of the hub lease ("edgeplan" as a 64-bit integer, so it cannot collide
# with another application's small integer keys).
LEASE_KEY = int.from_bytes(b"edgeplan", "big") & 0x7FFF_FFFF_FFFF_FFFF


class HubLease:
    """A held lease; :meth:`release` (or the process's end) gives it up."""

    def __init__(self, kind: str, *, lock_file: Any = None, connection: Any = None, check_s: float = 2.0):
        self.kind = kind
        self._file = lock_file
        self._conn = connection
        self.lost = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        if connection is not None:
            self._watch = asyncio.get_running_loop().create_task(self._check(check_s))

    async def _check(self, every_s: float) -> None:
        """The lock lives as long as its connection: once the connection fails, say so."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await asyncio.wait_for(self._conn.fetchval("SELECT 1"), timeout=max(every_s, 1.0))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.critical("the hub lease's database connection failed (%s): this hub stops", exc)
                self.lost.set()
                return

    def stop_when_lost(self, stop: asyncio.Event) -> None:
        """Set ``stop`` if the lease is lost (the command's shutdown path then runs as on a signal)."""

        async def relay() -> None:
            await self.lost.wait()
            stop.set()

        self._relay = asyncio.get_running_loop().create_task(relay())

    async def release(self) -> None:
        relay = getattr(self, "_relay", None)
        if relay is not None:
            relay.cancel()
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


async def _postgres_lease(dsn: str, where: str, *, poll_s: float, check_s: float) -> HubLease:
    import asyncpg

    said = False
    while True:
        try:
            conn = await asyncio.wait_for(asyncpg.connect(dsn), timeout=10)
        except Exception as exc:
            raise StartupError(f"cannot open the store at {where} for the hub lease: {exc}") from None
        try:
            held = await asyncio.wait_for(
                conn.fetchval("SELECT pg_try_advisory_lock($1)", LEASE_KEY), timeout=10
            )
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.close()
            raise
        if held:
            if said:
                log.warning("hub lease acquired on %s: this standby becomes the active hub", where)
            return HubLease("postgresql", connection=conn, check_s=check_s)
        await conn.close()
        if not said:
            log.warning(
                "another hub holds the lease on %s: standing by (checked every %.1f s)", where, poll_s
            )
            print(f"edgeplane hub: standby, another hub is active on {where}", flush=True)
            said = True
        await asyncio.sleep(poll_s)


async def acquire_hub_lease(database_url: str, *, poll_s: float = 1.0, check_s: float = 2.0) -> HubLease:
    """The store's hub lease: at once on SQLite (or :class:`StartupError` naming the holder),
    after standing by as long as another hub holds it on PostgreSQL."""
    from sqlalchemy.engine import make_url

    from edgeplane_contract.urls import mask_url

    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        path = _sqlite_path(url)
        return _sqlite_lease(path) if path is not None else HubLease("none")
    if backend == "postgresql":
        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return await _postgres_lease(dsn, mask_url(database_url), poll_s=poll_s, check_s=check_s)
    return HubLease("none")
