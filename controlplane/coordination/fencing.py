"""Fencing: a leader that lost the lease cannot write, even from inside a round it began before.

The lease (``hub_lease.py``) says who may act; a hub frozen in the middle of a round would still
finish that round when it wakes. So on a shared (PostgreSQL) store each new leader takes the next
*generation* of the one ``hub_leadership`` row (:func:`claim_leadership`), and every transaction
its store commits with a write in it first reads that row ``FOR SHARE`` and compares
(:func:`check_in_transaction`, called from the store's ``before_commit``): another generation
there means another hub leads now, the transaction rolls back with :class:`FencedError`, and
:attr:`Fence.fenced` tells the command to stop this hub.

The share lock closes the race between the check and the commit: a new leader's claim
(``UPDATE ... generation + 1``) waits for every transaction that checked, and where one of them
belongs to a frozen hub the claim ends that backend after ``lock_timeout`` (its transaction rolls
back) and tries again. So every write the old leader commits is ordered before the new leader's
claim, and none after it.

The row also carries the leader's API address: the other replicas forward the API there
(``standby_site.py``). SQLite stores have one hub (a file lock) and no fencing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from controlplane.errors import UnavailableError

__all__ = ["Fence", "FencedError", "Leader", "check_in_transaction", "claim_leadership", "current_leader"]

log = logging.getLogger("edgeplane.hub")

LEADERSHIP_ID = 1
_CHECK = text("SELECT generation FROM hub_leadership WHERE id = :id FOR SHARE")
_CLAIM = text(
    """
    INSERT INTO hub_leadership (id, generation, hub_id, api_url, since)
    VALUES (:id, 1, :hub_id, :api_url, :since)
    ON CONFLICT (id) DO UPDATE SET generation = hub_leadership.generation + 1,
        hub_id = EXCLUDED.hub_id, api_url = EXCLUDED.api_url, since = EXCLUDED.since
    RETURNING generation
    """
)
# Backends of other sessions holding a lock on the row's table (a frozen leader's check).
_HOLDERS = text(
    """
    SELECT DISTINCT l.pid FROM pg_locks l
    WHERE l.relation = 'hub_leadership'::regclass AND l.granted AND l.pid <> pg_backend_pid()
    """
)


class FencedError(UnavailableError):
    """This hub's generation is no longer the store's: another hub leads; nothing was written."""

    RETRY_AFTER_S = 2

    def __init__(self, mine: int, current: int | None) -> None:
        super().__init__(
            f"this hub no longer leads the store (its generation {mine}, the store's {current}): "
            "the write was rolled back"
        )
        self.mine = mine
        self.current = current
        # The request did nothing; asked again, it reaches the leader (through a standby).
        self.headers["Retry-After"] = str(self.RETRY_AFTER_S)


@dataclass(slots=True)
class Fence:
    """The generation this hub claimed; ``fenced`` is set once a write found another one."""

    generation: int
    fenced: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True, slots=True)
class Leader:
    generation: int
    hub_id: str
    api_url: str
    since: float


def check_in_transaction(sync_session: Any, fence: Fence) -> None:
    """Inside a transaction about to commit a write: the row's generation under a share lock,
    compared with ``fence``'s (:class:`FencedError` on a difference)."""
    current = sync_session.execute(_CHECK, {"id": LEADERSHIP_ID}).scalar()
    if current != fence.generation:
        if not fence.fenced.is_set():
            log.error(
                "fenced: the store's leadership generation is %s, this hub holds %s; "
                "its writes are refused from now on",
                current,
                fence.generation,
            )
        fence.fenced.set()
        raise FencedError(fence.generation, current)


async def claim_leadership(
    engine: Any, *, hub_id: str, api_url: str, lock_timeout_s: float = 2.0, tries: int = 10
) -> Fence:
    """Take the next generation (the caller holds the lease). A claim that waits on a frozen
    hub's open check for ``lock_timeout_s`` ends that hub's backend and tries again."""
    for attempt in range(1, tries + 1):
        try:
            async with engine.begin() as conn:
                await conn.execute(text(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'"))
                generation = (
                    await conn.execute(
                        _CLAIM,
                        {
                            "id": LEADERSHIP_ID,
                            "hub_id": hub_id[:63],
                            "api_url": api_url[:255],
                            "since": time.time(),
                        },
                    )
                ).scalar_one()
            log.info("leading the store as generation %d (API %s)", generation, api_url)
            return Fence(int(generation))
        except (OperationalError, DBAPIError) as exc:
            if "lock timeout" not in str(exc) and "lock_timeout" not in str(exc):
                raise
            async with engine.begin() as conn:
                holders = [row[0] for row in await conn.execute(_HOLDERS)]
                for pid in holders:
                    await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            log.warning(
                "leadership claim %d waited on the previous leader's open transactions (backends %s): "
                "ended them",
                attempt,
                holders,
            )
    raise UnavailableError(f"could not take the store's leadership in {tries} tries")


async def current_leader(engine: Any) -> Leader | None:
    """The row as it is (None: no hub has led this store yet)."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT generation, hub_id, api_url, since FROM hub_leadership WHERE id = :id"),
                {"id": LEADERSHIP_ID},
            )
        ).first()
    return None if row is None else Leader(int(row[0]), str(row[1]), str(row[2]), float(row[3]))
