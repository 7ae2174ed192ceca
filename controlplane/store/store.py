"""The hub's data access: one class, async methods, one short transaction each."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from controlplane.store.db import create_engine, migrate
from controlplane.store.models import ClusterRow, EventRow, NodeRow, PlacementRow, WorkloadRow

__all__ = ["ACTIVE_PLACEMENT", "TERMINAL_PLACEMENT", "Store"]

ACTIVE_PLACEMENT = ("Scheduled", "Running")
TERMINAL_PLACEMENT = ("Succeeded", "Failed", "Cancelled", "Lost")


class Store:
    """Owns the engine; hands out sessions; holds the few queries shared by hub and API."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str, *, run_migrations: bool = True) -> Store:
        engine = create_engine(url)
        if run_migrations:
            await migrate(engine)
        return cls(engine)

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on success and rolled back on error."""
        async with self._sessions() as session, session.begin():
            yield session

    async def ping(self) -> bool:
        async with self._sessions() as session:
            await session.execute(select(1))
        return True

    # --- events ---------------------------------------------------------------------------

    @staticmethod
    def add_event(
        session: AsyncSession,
        kind: str,
        object_kind: str,
        object_id: str,
        message: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        session.add(
            EventRow(
                ts=time.time(),
                kind=kind,
                object_kind=object_kind,
                object_id=object_id,
                message=message,
                data=data or {},
            )
        )

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
        async with self._sessions() as session:
            rows = await session.scalars(query.order_by(EventRow.id).limit(limit))
            return list(rows)

    # --- reads for the API ----------------------------------------------------------------

    async def list_clusters(self) -> list[ClusterRow]:
        async with self._sessions() as session:
            return list(await session.scalars(select(ClusterRow).order_by(ClusterRow.name)))

    async def count_nodes_by_cluster(self) -> dict[str, dict[str, int]]:
        query = select(NodeRow.cluster, NodeRow.status, func.count()).group_by(
            NodeRow.cluster, NodeRow.status
        )
        counts: dict[str, dict[str, int]] = {}
        async with self._sessions() as session:
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
        async with self._sessions() as session:
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
    ) -> tuple[list[WorkloadRow], int]:
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
        return await self._page(query, WorkloadRow.created_at, limit, offset)

    async def get_workload(self, workload_id: str) -> tuple[WorkloadRow, list[PlacementRow]] | None:
        async with self._sessions() as session:
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
        async with self._sessions() as session:
            rows = await session.scalars(
                select(PlacementRow)
                .where(PlacementRow.workload_id.in_(list(workload_ids)))
                .order_by(PlacementRow.replica, PlacementRow.attempt)
            )
            for row in rows:
                result[row.workload_id].append(row)
        return result

    async def find_workload_by_key(self, key: str) -> WorkloadRow | None:
        async with self._sessions() as session:
            return await session.scalar(select(WorkloadRow).where(WorkloadRow.idempotency_key == key))

    async def _page(self, query: Any, order: Any, limit: int, offset: int) -> tuple[list[Any], int]:
        async with self._sessions() as session:
            total = await session.scalar(select(func.count()).select_from(query.subquery()))
            rows = await session.scalars(query.order_by(order).limit(limit).offset(offset))
            return list(rows), int(total or 0)
