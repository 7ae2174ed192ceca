"""The hub's reads of nodes, workloads and placements, inside a session the caller holds (its
writes go in the same transaction). The hub's state machine says what to do; this module only
says how to find the rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import and_, or_, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from controlplane.store.models import NodeRow, PlacementRow, WorkloadRow
from controlplane.store.store import ACTIVE_PLACEMENT

__all__ = [
    "active_placements",
    "active_placements_of_nodes",
    "all_nodes",
    "kept_placement_ids",
    "node_labels",
    "nodes_named",
    "other_attempts",
    "pending_heads",
    "pending_workloads",
    "placements_by_id",
    "placements_of",
    "placements_of_many",
    "unsent_placements",
]


# The hub's hot reads of placements skip the scheduler's explanation (a JSON document per
# placement that only the API shows), which would otherwise be parsed on every report and round.
# Reading it from these rows raises instead of loading it behind the caller's back.
WITHOUT_EXPLANATION = defer(PlacementRow.explanation, raiseload=True)


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


async def node_labels(s: AsyncSession) -> dict[str, dict[str, str]]:
    """Every node's labels as it registered them (the labels column alone)."""
    rows = (await s.execute(select(NodeRow.name, NodeRow.labels))).all()
    return {name: dict(labels or {}) for name, labels in rows}


async def nodes_named(s: AsyncSession, names: Sequence[str]) -> dict[str, NodeRow]:
    """The rows of those of ``names`` that are known, in one query (a batch of registrations)."""
    if not names:
        return {}
    rows = await s.scalars(select(NodeRow).where(NodeRow.name.in_(sorted(set(names)))))
    return {row.name: row for row in rows}


async def active_placements_of_nodes(s: AsyncSession, nodes: Sequence[str]) -> dict[str, list[PlacementRow]]:
    """The Scheduled or Running placements of each of ``nodes``, in one query."""
    found: dict[str, list[PlacementRow]] = {node: [] for node in nodes}
    if not found:
        return found
    query = select(PlacementRow).where(
        PlacementRow.status.in_(ACTIVE_PLACEMENT), PlacementRow.node.in_(sorted(found))
    )
    for placement in await s.scalars(query):
        found[placement.node].append(placement)
    return found


async def other_attempts(s: AsyncSession, placement: PlacementRow) -> list[PlacementRow]:
    """The other attempts of ``placement``'s replica, in any state."""
    return list(
        await s.scalars(
            select(PlacementRow)
            .where(
                PlacementRow.workload_id == placement.workload_id,
                PlacementRow.replica == placement.replica,
                PlacementRow.id != placement.id,
            )
            .options(WITHOUT_EXPLANATION)
        )
    )


async def placements_of(s: AsyncSession, workload_id: str, *, ordered: bool = False) -> list[PlacementRow]:
    """Every placement of a workload (``ordered``: by replica, then attempt)."""
    query = select(PlacementRow).where(PlacementRow.workload_id == workload_id).options(WITHOUT_EXPLANATION)
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
        .options(WITHOUT_EXPLANATION)
    )
    for placement in await s.scalars(query):
        found[placement.workload_id].append(placement)
    return found


async def placements_by_id(s: AsyncSession, ids: Collection[str]) -> dict[str, PlacementRow]:
    """The placements of ``ids`` that exist, by id, in one query."""
    if not ids:
        return {}
    query = select(PlacementRow).where(PlacementRow.id.in_(list(ids))).options(WITHOUT_EXPLANATION)
    return {p.id: p for p in await s.scalars(query)}


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
            select(PlacementRow)
            .where(
                PlacementRow.status.in_(ACTIVE_PLACEMENT),
                or_(
                    and_(PlacementRow.stop_command_id.is_not(None), PlacementRow.stop_acked.is_not(True)),
                    and_(PlacementRow.stop_command_id.is_(None), PlacementRow.acked.is_not(True)),
                ),
            )
            .options(WITHOUT_EXPLANATION)
        )
    )
