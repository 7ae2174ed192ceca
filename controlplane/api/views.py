"""Rendering store rows as API JSON (ISO 8601 timestamps, derived fields)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controlplane.store.models import ClusterRow, EventRow, NodeRow, PlacementRow, WorkloadRow

__all__ = ["event_json", "iso", "node_json", "placement_json", "workload_json"]


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def node_json(row: NodeRow, *, region: str, allocated: dict[str, Any]) -> dict[str, Any]:
    telemetry = row.telemetry or {}
    return {
        "name": row.name,
        "cluster": row.cluster,
        "region": region,
        "status": row.status,
        "node_type": row.node_type,
        "labels": row.labels,
        "resources": row.resources,
        "allocated": allocated,
        "power": {"source": row.power_source, "battery_percent": row.battery_percent},
        "weights": dict(zip(("w1", "w2", "w3", "w4"), telemetry.get("weights") or [], strict=False)),
        "telemetry": telemetry,
        "isolation": row.isolation or {},
        "agent_version": row.agent_version,
        "heartbeat_interval_s": row.heartbeat_interval_s,
        "registered_at": iso(row.registered_at),
        "last_heartbeat_at": iso(row.last_heartbeat_at),
    }


def placement_json(row: PlacementRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "replica": row.replica,
        "attempt": row.attempt,
        "node": row.node,
        "cluster": row.cluster,
        "status": row.status,
        "exit_code": row.exit_code,
        "message": row.message,
        "restarts": row.restarts or 0,
        "assignment": row.assignment,
        "scheduled_at": iso(row.scheduled_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
    }


def workload_json(row: WorkloadRow, placements: list[PlacementRow]) -> dict[str, Any]:
    latest: dict[int, PlacementRow] = {}
    for placement in placements:
        latest[placement.replica] = placement
    current = [latest[r] for r in sorted(latest)]
    exit_codes = [p.exit_code for p in current]
    scheduled = [p.scheduled_at for p in placements]
    started = [p.started_at for p in placements if p.started_at is not None]
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "message": row.message,
        "spec": row.spec,
        "replicas": row.replicas,
        "priority": row.priority,
        "node": current[0].node if len(current) == 1 else None,
        "nodes": sorted({p.node for p in current}),
        "exit_code": exit_codes[0] if len(exit_codes) == 1 else None,
        # Local restarts of the replicas' current placements (the agents restart processes).
        "restarts": sum(p.restarts or 0 for p in current),
        "created_at": iso(row.created_at),
        "scheduled_at": iso(min(scheduled)) if scheduled else None,
        "started_at": iso(min(started)) if started else None,
        "finished_at": iso(row.finished_at),
        "updated_at": iso(row.updated_at),
        "placements": [placement_json(p) for p in placements],
    }


def cluster_json(row: ClusterRow, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "name": row.name,
        "region": row.region,
        "status": row.status,
        "nodes": sum(counts.values()),
        "ready_nodes": counts.get("Ready", 0),
    }


def event_json(row: EventRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "time": iso(row.ts),
        "kind": row.kind,
        "object_kind": row.object_kind,
        "object_id": row.object_id,
        "message": row.message,
        "data": row.data,
    }
