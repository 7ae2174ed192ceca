"""Rendering store rows as API JSON (ISO 8601 timestamps, derived fields)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controlplane.store.models import ClusterRow, EventRow, NodeRow, PlacementRow, WorkloadRow

__all__ = [
    "RESPONSE_SCHEMAS",
    "cluster_json",
    "event_json",
    "iso",
    "node_json",
    "placement_json",
    "workload_json",
]


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


# Hand-written: the renderers above build plain dicts from store rows, so nothing typed says what
# they hold; these schemas sit beside them to be changed with them (the fuzz test and
# test_nullable_fields_come_back_null_and_the_document_says_so check real answers against them).
RESPONSE_SCHEMAS: dict[str, Any] = {
    "Placement": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "replica": {"type": "integer"},
            "attempt": {"type": "integer"},
            "node": {"type": "string"},
            "cluster": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["Scheduled", "Running", "Succeeded", "Failed", "Cancelled", "Lost"],
            },
            "exit_code": {"type": ["integer", "null"]},
            "message": {"type": "string"},
            "restarts": {"type": "integer", "description": "local restarts by the agent"},
            "assignment": {"type": "object"},
            "scheduled_at": {"type": ["string", "null"], "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "Workload": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["Pending", "Scheduled", "Running", "Succeeded", "Failed", "Cancelling", "Cancelled"],
            },
            "message": {"type": "string"},
            "spec": {"$ref": "#/components/schemas/StoredWorkloadSpec"},
            "node": {"type": ["string", "null"]},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "exit_code": {"type": ["integer", "null"]},
            "restarts": {"type": "integer", "description": "local restarts of the current placements"},
            "created_at": {"type": "string", "format": "date-time"},
            "scheduled_at": {"type": ["string", "null"], "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "placements": {"type": "array", "items": {"$ref": "#/components/schemas/Placement"}},
        },
        "required": ["id", "name", "status"],
    },
    "Node": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "cluster": {"type": "string"},
            "region": {"type": "string"},
            "status": {"type": "string", "enum": ["Ready", "NotReady"]},
            "node_type": {"type": "string"},
            "labels": {"type": "object"},
            "resources": {"type": "object"},
            "allocated": {"type": "object"},
            "power": {"type": "object"},
            "telemetry": {"type": "object"},
            "isolation": {"type": "object", "additionalProperties": {"type": "string"}},
            "credentials": {"type": "string", "enum": ["revoked"]},
            "last_heartbeat_at": {"type": ["string", "null"], "format": "date-time"},
        },
        "required": ["name", "cluster", "status"],
    },
    "Cluster": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "region": {"type": "string"},
            "status": {"type": "string", "enum": ["Unknown", "Available", "Unavailable"]},
            "nodes": {"type": "integer"},
            "ready_nodes": {"type": "integer"},
        },
    },
    "Event": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "time": {"type": "string", "format": "date-time"},
            "kind": {"type": "string"},
            "object_kind": {"type": "string"},
            "object_id": {"type": "string"},
            "message": {"type": "string"},
            "data": {"type": "object"},
        },
    },
}
