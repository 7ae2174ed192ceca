"""The hub's reads of nodes, workloads and placements, inside a session the caller holds (its
writes go in the same transaction). The hub's state machine says what to do; this module only
says how to find the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, or_, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.store.models import NodeRow, PlacementRow, WorkloadRow
from controlplane.store.store import ACTIVE_PLACEMENT

__all__ = [
    "active_placements",
    "all_nodes",
    "kept_placement_ids",
    "other_attempts",
    "pending_heads",
    "pending_workloads",
    "placements_of",
    "placements_of_many",
    "unsent_placements",
]


async def all_nodes(s: AsyncSession) -> list[NodeRow]:
    return list(await s.scalars(select(NodeRow)))


async def active_placements(
    s: AsyncSession, *, node: str | None = None, workload_id: str | None = None, replica: int | None = None
) -> list[PlacementRow]:
    """Placements that are Scheduled or Running, optionally of one node, workload or replica."""
    query = select(PlacementRow).where(PlacementRow.status.in_(ACTIVE_PLACEMENT))
    if node is not None:
        query = query.where(PlacementRow.node == node)
    if workload_id is not None:
        query = query.where(PlacementRow.workload_id == workload_id)
    if replica is not None:
        query = query.where(PlacementRow.replica == replica)
    return list(await s.scalars(query))


async def kept_placement_ids(s: AsyncSession, node: str) -> list[str]:
    """The active placements of ``node`` the hub has not asked to stop: what its agent keeps."""
    return list(
        await s.scalars(
            select(PlacementRow.id).where(
                PlacementRow.node == node,
                PlacementRow.status.in_(ACTIVE_PLACEMENT),
                PlacementRow.stop_command_id.is_(None),
            )
        )
    )


async def other_attempts(s: AsyncSession, placement: PlacementRow) -> list[PlacementRow]:
    """The other attempts of ``placement``'s replica, in any state."""
    return list(
        await s.scalars(
            select(PlacementRow).where(
                PlacementRow.workload_id == placement.workload_id,
                PlacementRow.replica == placement.replica,
                PlacementRow.id != placement.id,
            )
        )
    )


async def placements_of(s: AsyncSession, workload_id: str, *, ordered: bool = False) -> list[PlacementRow]:
    """Every placement of a workload (``ordered``: by replica, then attempt)."""
    query = select(PlacementRow).where(PlacementRow.workload_id == workload_id)
    if ordered:
        query = query.order_by(PlacementRow.replica, PlacementRow.attempt)
    return list(await s.scalars(query))


async def pending_workloads(s: AsyncSession, *, limit: int) -> list[WorkloadRow]:
    """Pending workloads not being cancelled, highest priority first, then oldest."""
    return list(
        await s.scalars(
            select(WorkloadRow)
            .where(WorkloadRow.status == "Pending", WorkloadRow.cancel_requested.is_(False))
            .order_by(WorkloadRow.priority.desc(), WorkloadRow.created_at)
            .limit(limit)
        )
    )


async def placements_of_many(s: AsyncSession, workload_ids: Sequence[str]) -> dict[str, list[PlacementRow]]:
    """Every placement of each of ``workload_ids`` (by replica, then attempt), in one query."""
    found: dict[str, list[PlacementRow]] = {workload_id: [] for workload_id in workload_ids}
    if not found:
        return found
    query = (
        select(PlacementRow)
        .where(PlacementRow.workload_id.in_(list(found)))
        .order_by(PlacementRow.replica, PlacementRow.attempt)
    )
    for placement in await s.scalars(query):
        found[placement.workload_id].append(placement)
    return found


async def pending_heads(s: AsyncSession, *, limit: int) -> list[Row[tuple[str, int, str]]]:
    """(id, replicas, message) of the pending workloads not being cancelled, in the order of
    :func:`pending_workloads`: no spec column is read (nor parsed)."""
    return list(
        await s.execute(
            select(WorkloadRow.id, WorkloadRow.replicas, WorkloadRow.message)
            .where(WorkloadRow.status == "Pending", WorkloadRow.cancel_requested.is_(False))
            .order_by(WorkloadRow.priority.desc(), WorkloadRow.created_at)
            .limit(limit)
        )
    )


async def unsent_placements(s: AsyncSession) -> list[PlacementRow]:
    """Active placements with a command the agent has not acknowledged: a run command (no stop
    asked), or a stop command."""
    return list(
        await s.scalars(
            select(PlacementRow).where(
                PlacementRow.status.in_(ACTIVE_PLACEMENT),
                or_(
                    and_(PlacementRow.stop_command_id.is_not(None), PlacementRow.stop_acked.is_not(True)),
                    and_(PlacementRow.stop_command_id.is_(None), PlacementRow.acked.is_not(True)),
                ),
            )
        )
    )
