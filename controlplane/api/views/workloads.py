"""Workloads, their placements, and why each replica went where it went."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from controlplane.api.params import WORKLOAD_STATUSES
from controlplane.api.views.base import DateTime, OptionalDateTime, iso, json_name, one_of
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.models import PlacementRow, WorkloadRow
from controlplane.store.store import TERMINAL_PLACEMENT
from controlplane.typeschema import StoredAs

__all__ = ["Placement", "PlacementDecision", "PlacementExplanation", "Workload", "WorkloadPage"]

PlacementStatus = Annotated[str, one_of(("Scheduled", "Running", *TERMINAL_PLACEMENT))]
WorkloadStatus = Annotated[str, one_of(WORKLOAD_STATUSES)]


@dataclass(frozen=True, slots=True)
class Placement:
    """One attempt at running one replica on one node."""

    id: str
    replica: int
    attempt: int
    node: str
    cluster: str
    status: PlacementStatus
    exit_code: int | None
    message: str
    restarts: Annotated[int, {"description": "local restarts by the agent"}]
    assignment: dict[str, Any]
    scheduled_at: OptionalDateTime
    started_at: OptionalDateTime
    finished_at: OptionalDateTime

    @classmethod
    def of(cls, row: PlacementRow) -> Placement:
        return cls(
            id=row.id,
            replica=row.replica,
            attempt=row.attempt,
            node=row.node,
            cluster=row.cluster,
            status=row.status,
            exit_code=row.exit_code,
            message=row.message,
            restarts=row.restarts or 0,
            assignment=row.assignment,
            scheduled_at=iso(row.scheduled_at),
            started_at=iso(row.started_at),
            finished_at=iso(row.finished_at),
        )


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload with every placement it has had; node, exit code and times from the current ones."""

    id: str
    name: str
    status: WorkloadStatus
    message: str
    spec: Annotated[dict[str, Any], StoredAs(WorkloadSpec)]
    replicas: int
    priority: int
    node: str | None
    nodes: list[str]
    exit_code: int | None
    restarts: Annotated[int, {"description": "local restarts of the current placements"}]
    created_at: DateTime
    scheduled_at: OptionalDateTime
    started_at: OptionalDateTime
    finished_at: OptionalDateTime
    updated_at: DateTime
    placements: list[Placement]

    @classmethod
    def of(cls, row: WorkloadRow, placements: list[PlacementRow]) -> Workload:
        latest: dict[int, PlacementRow] = {}
        for placement in placements:
            latest[placement.replica] = placement
        current = [latest[r] for r in sorted(latest)]
        exit_codes = [p.exit_code for p in current]
        scheduled = [p.scheduled_at for p in placements]
        started = [p.started_at for p in placements if p.started_at is not None]
        return cls(
            id=row.id,
            name=row.name,
            status=row.status,
            message=row.message,
            spec=row.spec,
            replicas=row.replicas,
            priority=row.priority,
            node=current[0].node if len(current) == 1 else None,
            nodes=sorted({p.node for p in current}),
            exit_code=exit_codes[0] if len(exit_codes) == 1 else None,
            # Local restarts of the replicas' current placements (the agents restart processes).
            restarts=sum(p.restarts or 0 for p in current),
            created_at=iso(row.created_at),
            scheduled_at=iso(min(scheduled)) if scheduled else None,
            started_at=iso(min(started)) if started else None,
            finished_at=iso(row.finished_at),
            updated_at=iso(row.updated_at),
            placements=[Placement.of(p) for p in placements],
        )


@dataclass(frozen=True, slots=True)
class WorkloadPage:
    """A page of ``GET /v1/workloads``, newest first; ``continue`` (as Kubernetes' list metadata
    spells it) is the token of the next page, null on the last one."""

    items: list[Workload]
    total: Annotated[int, {"description": "every workload matching the filters, on all pages"}]
    limit: int
    offset: int
    continue_: Annotated[
        str | None, {"description": "pass as `?continue=` for the next page; null when no more remain"}
    ] = json_name("continue")


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    """One placement and the scheduler's explanation of it (chosen action, alternatives, scores)."""

    placement_id: str
    replica: int
    attempt: int
    node: str
    cluster: str
    assignment: dict[str, Any]
    explanation: dict[str, Any]

    @classmethod
    def of(cls, row: PlacementRow) -> PlacementDecision:
        return cls(
            placement_id=row.id,
            replica=row.replica,
            attempt=row.attempt,
            node=row.node,
            cluster=row.cluster,
            assignment=row.assignment,
            explanation=row.explanation,
        )


@dataclass(frozen=True, slots=True)
class PlacementExplanation:
    """``GET /v1/workloads/{id}/placement``: every placement of the workload with its explanation."""

    workload_id: str
    status: WorkloadStatus
    message: str
    decisions: list[PlacementDecision]

    @classmethod
    def of(cls, row: WorkloadRow, placements: list[PlacementRow]) -> PlacementExplanation:
        return cls(
            workload_id=row.id,
            status=row.status,
            message=row.message,
            decisions=[PlacementDecision.of(p) for p in placements],
        )
