"""The hub's data access: one class, async methods, one short transaction each."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import Text, and_, cast, event, func, insert, or_, select
from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction

from controlplane.errors import StoreUnavailableError
from controlplane.store.availability import WriteHealth, is_unavailable, short_reason
from controlplane.store.db import create_engine, migrate
from controlplane.store.models import ClusterRow, EventRow, FunctionRow, NodeRow, PlacementRow, WorkloadRow
from controlplane.store.secrets import PREFIX, EnvCipher, attach_cipher

__all__ = ["ACTIVE_PLACEMENT", "TERMINAL_PLACEMENT", "Store"]

ACTIVE_PLACEMENT = ("Scheduled", "Running")
TERMINAL_PLACEMENT = ("Succeeded", "Failed", "Cancelled", "Lost")
# How often a store whose writes failed is probed with a write (``writable``), and how often one
# that writes is (a full disk shows only when something is written).
PROBE_FAILING_S = 2.0
PROBE_OK_S = 10.0


class _WriteTrackingSession(Session):
    """A session that notes in ``info["wrote"]`` that it flushed or executed a write: only a
    committed write, not a read, tells that a store whose writes failed writes again."""


@event.listens_for(_WriteTrackingSession, "after_flush")
def _flushed(session: Session, _flush: UOWTransaction) -> None:
    session.info["wrote"] = True


@event.listens_for(_WriteTrackingSession, "do_orm_execute")
def _executed(state: ORMExecuteState) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        state.session.info["wrote"] = True


# Where a session keeps the events added to it until it commits.
_EVENTS = "edgeplane_events"


@event.listens_for(_WriteTrackingSession, "before_commit")
def _write_events(session: Session) -> None:
    """The transaction's events in one executemany, in the order they were added, as part of it
    (a rolled-back transaction writes none)."""
    rows = session.info.pop(_EVENTS, None)
    if rows:
        session.execute(insert(EventRow), rows)


@event.listens_for(_WriteTrackingSession, "before_commit")
def _check_before_commit(session: Session) -> None:
    """A transaction with a write in it runs the store's ``commit_check`` last (fencing: a hub
    that no longer leads a shared store must not commit, ``coordination/fencing.py``)."""
    store = session.info.get("store")
    check = store.commit_check if store is not None else None
    if check is not None and (session.info.get("wrote") or session.new or session.dirty or session.deleted):
        check(session)


@event.listens_for(_WriteTrackingSession, "after_rollback")
def _drop_events(session: Session) -> None:
    session.info.pop(_EVENTS, None)


class Store:
    """Owns the engine; hands out sessions; holds the few queries shared by hub and API.

    An error that means the store is away or cannot write (:func:`is_unavailable`) leaves every
    session as :class:`StoreUnavailableError` and is remembered in ``health`` until a write
    succeeds again, so that ``/healthz`` reports a store that reads but cannot write."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._sessions = async_sessionmaker(
            engine, expire_on_commit=False, sync_session_class=_WriteTrackingSession, info={"store": self}
        )
        # Run inside every transaction that writes, just before it commits (None: nothing): the
        # leader's fence on a shared store. It may raise to roll the transaction back.
        self.commit_check: Callable[[Session], None] | None = None
        self.health = WriteHealth()
        self._probed_at = 0.0

    @classmethod
    async def open(
        cls, url: str, *, run_migrations: bool = True, env_cipher: EnvCipher | None = None
    ) -> Store:
        """Open (and migrate) the store; with ``env_cipher``, workloads' and functions' ``env``
        values are sealed at rest with it (``store/secrets.py``), and a key that cannot open
        what is stored already fails here (SecretsKeyError), not at the first placement."""
        engine = create_engine(url)
        attach_cipher(engine, env_cipher)
        try:
            if run_migrations:
                await migrate(engine)
            store = cls(engine)
            if env_cipher is not None:
                await store._check_cipher()
        except BaseException:
            await engine.dispose()
            raise
        return store

    async def _check_cipher(self) -> None:
        """Open one sealed spec of each kind, if any (a scan, once at start)."""
        async with self._sessions() as session:
            for column in (WorkloadRow.spec, FunctionRow.spec):
                text = cast(column, Text)
                await session.scalar(select(column).where(text.like(f"%{PREFIX}%")).limit(1))

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on success and rolled back on error."""
        try:
            async with self._sessions() as session, session.begin():
                yield session
        except Exception as exc:
            if isinstance(exc, StoreUnavailableError) or not is_unavailable(exc):
                raise
            raise self._unavailable(exc) from exc
        if session.info.get("wrote"):
            self.health.succeeded()

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncSession]:
        """A session for reads (no transaction of its own); store errors as in :meth:`session`."""
        try:
            async with self._sessions() as session:
                yield session
        except Exception as exc:
            if isinstance(exc, StoreUnavailableError) or not is_unavailable(exc):
                raise
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        """``exc``, an error that means the store is away or cannot write, as callers see it
        (and remembered in ``health``)."""
        self.health.failed(exc)
        return StoreUnavailableError(short_reason(exc))

    async def ping(self) -> bool:
        async with self._reading() as session:
            await session.execute(select(1))
        return True

    async def writable(self, *, now: float | None = None) -> bool:
        """Whether the store takes writes: False while the last write failed; a small write
        (a no-op UPDATE of the schema's version row) is tried at most every ``PROBE_FAILING_S``
        then, and every ``PROBE_OK_S`` otherwise (a full disk shows only when something is
        written)."""
        now = time.monotonic() if now is None else now
        due = PROBE_FAILING_S if self.health.failing else PROBE_OK_S
        if now - self._probed_at >= due:
            self._probed_at = now
            try:
                async with self.session() as session:
                    await session.execute(sql_text("UPDATE alembic_version SET version_num = version_num"))
            except StoreUnavailableError:
                pass  # remembered in health by session()
            except Exception:  # no schema yet (never migrated): not a store outage
                pass
            else:
                self.health.succeeded()
        return not self.health.failing

    # --- events ---------------------------------------------------------------------------

    @staticmethod
    def add_event(
        session: AsyncSession | Session,
        kind: str,
        object_kind: str,
        object_id: str,
        message: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        """Record an event in ``session``'s transaction: written with the transaction's other
        events in one insert as it commits (``_write_events``), not one ORM object each."""
        row = {
            "ts": time.time(),
            "kind": kind,
            "object_kind": object_kind,
            "object_id": object_id,
            "message": message,
            "data": data or {},
        }
        getattr(session, "sync_session", session).info.setdefault(_EVENTS, []).append(row)

    async def list_events(
        self,
        *,
        after_id: int = 0,
        kind: str | None = None,
        object_id: str | None = None,
        limit: int = 100,
    ) -> list[EventRow]:
        query = select(EventRow).where(EventRow.id > after_id)
        if kind:
            query = query.where(EventRow.kind == kind)
        if object_id:
            query = query.where(EventRow.object_id == object_id)
        async with self._reading() as session:
            rows = await session.scalars(query.order_by(EventRow.id).limit(limit))
            return list(rows)

    # --- reads for the API ----------------------------------------------------------------

    async def list_clusters(self) -> list[ClusterRow]:
        async with self._reading() as session:
            return list(await session.scalars(select(ClusterRow).order_by(ClusterRow.name)))

    async def count_nodes_by_cluster(self) -> dict[str, dict[str, int]]:
        query = select(NodeRow.cluster, NodeRow.status, func.count()).group_by(
            NodeRow.cluster, NodeRow.status
        )
        counts: dict[str, dict[str, int]] = {}
        async with self._reading() as session:
            for cluster, status, count in await session.execute(query):
                counts.setdefault(cluster, {})[status] = count
        return counts

    async def list_nodes(
        self, *, cluster: str | None = None, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[NodeRow], int]:
        query = select(NodeRow)
        if cluster:
            query = query.where(NodeRow.cluster == cluster)
        if status:
            query = query.where(NodeRow.status == status)
        return await self._page(query, NodeRow.name, limit, offset)

    async def get_node(self, name: str) -> NodeRow | None:
        async with self._reading() as session:
            return await session.get(NodeRow, name)

    async def list_workloads(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        node: str | None = None,
        cluster: str | None = None,
        limit: int = 100,
        offset: int = 0,
        after: tuple[float, str] | None = None,
    ) -> tuple[list[WorkloadRow], int]:
        """A page of the workloads matching every filter given, newest first, and their total.

        ``after`` is a keyset position (created_at, id): the page starts with the next older
        workload, so that pages do not shift while new workloads arrive (the API's continue token).
        """
        query = select(WorkloadRow)
        if status:
            query = query.where(WorkloadRow.status == status)
        if name:
            query = query.where(WorkloadRow.name == name)
        if node or cluster:
            sub = select(PlacementRow.workload_id)
            if node:
                sub = sub.where(PlacementRow.node == node)
            if cluster:
                sub = sub.where(PlacementRow.cluster == cluster)
            query = query.where(WorkloadRow.id.in_(sub))
        # Newest first, so that new work is on the first page; the id breaks ties so pages do not
        # overlap.
        order = (WorkloadRow.created_at.desc(), WorkloadRow.id.desc())
        if after is None:
            return await self._page(query, order, limit, offset)
        created_at, workload_id = after
        older = or_(
            WorkloadRow.created_at < created_at,
            and_(WorkloadRow.created_at == created_at, WorkloadRow.id < workload_id),
        )
        async with self._reading() as session:
            # The total counts every match, not only those after the position.
            total = await session.scalar(select(func.count()).select_from(query.subquery()))
            rows = await session.scalars(query.where(older).order_by(*order).limit(limit).offset(offset))
            return list(rows), int(total or 0)

    async def get_workload(self, workload_id: str) -> tuple[WorkloadRow, list[PlacementRow]] | None:
        async with self._reading() as session:
            row = await session.get(WorkloadRow, workload_id)
            if row is None:
                return None
            placements = await session.scalars(
                select(PlacementRow)
                .where(PlacementRow.workload_id == workload_id)
                .order_by(PlacementRow.replica, PlacementRow.attempt)
            )
            return row, list(placements)

    async def placements_for(self, workload_ids: Sequence[str]) -> dict[str, list[PlacementRow]]:
        if not workload_ids:
            return {}
        result: dict[str, list[PlacementRow]] = {wid: [] for wid in workload_ids}
        async with self._reading() as session:
            rows = await session.scalars(
                select(PlacementRow)
                .where(PlacementRow.workload_id.in_(list(workload_ids)))
                .order_by(PlacementRow.replica, PlacementRow.attempt)
            )
            for row in rows:
                result[row.workload_id].append(row)
        return result

    async def find_workload_by_key(self, key: str) -> WorkloadRow | None:
        async with self._reading() as session:
            return await session.scalar(select(WorkloadRow).where(WorkloadRow.idempotency_key == key))

    async def _page(self, query: Any, order: Any, limit: int, offset: int) -> tuple[list[Any], int]:
        """One page of ``query`` and the total; ``order`` is one column or a tuple of them."""
        async with self._reading() as session:
            total = await session.scalar(select(func.count()).select_from(query.subquery()))
            columns = order if isinstance(order, tuple) else (order,)
            rows = await session.scalars(query.order_by(*columns).limit(limit).offset(offset))
            return list(rows), int(total or 0)
