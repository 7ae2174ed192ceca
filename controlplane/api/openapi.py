"""The OpenAPI 3 document of the hub's API; a test checks it lists exactly the app's routes."""

from __future__ import annotations

from typing import Any

from controlplane import __version__

__all__ = ["openapi_document"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "Error (the field names what was wrong)")
_PAGE_PARAMS = [
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    },
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "default": 0}},
]


def _list_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": _ref(item)},
            "total": {"type": "integer"},
            "limit": {"type": "integer"},
            "offset": {"type": "integer"},
        },
        "required": ["items"],
    }


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": ["string", "null"]},
                },
                "required": ["code", "message", "field"],
            }
        },
        "required": ["error"],
    },
    "Resources": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "cpu": {
                "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string", "example": "500m"}]
            },
            "memory": {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "example": "64Mi"}]},
            "gpu": {"type": "integer", "minimum": 0, "maximum": 64},
            "mig": {
                "oneOf": [
                    {"type": "string", "enum": ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]},
                    {"type": "array", "items": {"type": "string"}},
                ]
            },
            "dpu": {"type": "integer", "minimum": 0, "maximum": 64},
        },
    },
    "Affinity": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "clusters": {"type": "array", "items": {"type": "string"}},
            "regions": {"type": "array", "items": {"type": "string"}},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "node_labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "WorkloadSpec": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "command"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"},
            "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "resources": _ref("Resources"),
            "replicas": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
            "priority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0},
            "affinity": _ref("Affinity"),
            "anti_affinity": _ref("Affinity"),
            "gang": {"type": "boolean", "default": False},
            "kind": {"type": "string", "enum": ["batch", "service", "analytics", "inference"]},
            "sla_latency_s": {"type": "number", "exclusiveMinimum": 0},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
            "restart_policy": {
                "type": "string",
                "enum": ["never", "on-failure", "always"],
                "default": "never",
                "description": "when the agent restarts the process itself (also without the hub)",
            },
            "max_restarts": {"type": "integer", "minimum": 0, "maximum": 10000, "default": 5},
        },
    },
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
            "spec": _ref("WorkloadSpec"),
            "node": {"type": ["string", "null"]},
            "nodes": {"type": "array", "items": {"type": "string"}},
            "exit_code": {"type": ["integer", "null"]},
            "restarts": {"type": "integer", "description": "local restarts of the current placements"},
            "created_at": {"type": "string", "format": "date-time"},
            "scheduled_at": {"type": ["string", "null"], "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "placements": {"type": "array", "items": _ref("Placement")},
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
            "last_heartbeat_at": {"type": "string", "format": "date-time"},
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

_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_VERSION = {"name": "version", "in": "query", "schema": {"type": "integer", "minimum": 1}}

_SCHEMAS["FunctionSpec"] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$"},
        "version": {"type": "integer", "minimum": 1, "description": "omit to get the next version"},
        "runtime": {"type": "string", "enum": ["python", "command"], "default": "python"},
        "source": {"type": "string", "description": "Python source defining the handler"},
        "handler": {"type": "string", "description": "a name in source, or module:function"},
        "path": {"type": "string", "description": "directory on the agents to import module:function from"},
        "command": {"type": "array", "items": {"type": "string"}, "description": "runtime command: argv"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "memory": {"oneOf": [{"type": "integer"}, {"type": "string", "example": "128Mi"}]},
        "cpu": {"oneOf": [{"type": "number"}, {"type": "string"}]},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 900, "default": 30},
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
        "gpu": {"type": "integer", "minimum": 0, "maximum": 8},
        "mig": {"type": "string"},
        "sla_latency_ms": {"type": "number", "exclusiveMinimum": 0},
        "affinity": _ref("Affinity"),
    },
}
_SCHEMAS["Function"] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "version": {"type": "integer"},
        "versions": {"type": "array", "items": {"type": "integer"}},
        "spec": _ref("FunctionSpec"),
        "instances": {"type": "array", "items": {"type": "object"}},
        "stats": {"type": "object"},
        "policy": {"type": "object"},
    },
}
_SCHEMAS["Invocation"] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "function": {"type": "string"},
        "version": {"type": "integer"},
        "status": {"type": "string", "enum": ["Queued", "Running", "Succeeded", "Failed"]},
        "node": {"type": ["string", "null"]},
        "cold_start": {"type": ["boolean", "null"]},
        "result": {},
        "error": {"type": ["object", "null"]},
        "timings": {"type": "object"},
    },
}

_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "summary": "Liveness and readiness (database, NATS)",
            "responses": {"200": _json({"type": "object"}), "503": _json({"type": "object"}, "Degraded")},
        }
    },
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": _json({"type": "object"})}}},
    "/v1/clusters": {
        "get": {"summary": "Clusters of the federation", "responses": {"200": _json(_list_of("Cluster"))}}
    },
    "/v1/nodes": {
        "get": {
            "summary": "Edge nodes",
            "parameters": [
                *_PAGE_PARAMS,
                {"name": "cluster", "in": "query", "schema": {"type": "string"}},
                {
                    "name": "status",
                    "in": "query",
                    "schema": {"type": "string", "enum": ["Ready", "NotReady"]},
                },
            ],
            "responses": {"200": _json(_list_of("Node")), "422": _ERROR},
        }
    },
    "/v1/nodes/{name}": {
        "get": {
            "summary": "One node",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json(_ref("Node")), "404": _ERROR},
        }
    },
    "/v1/nodes/{name}/decisions": {
        "get": {
            "summary": "The node's local-policy decision log (rewards Laplace-noised on the node)",
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json({"type": "object"}), "404": _ERROR, "503": _ERROR},
        }
    },
    "/v1/workloads": {
        "post": {
            "summary": "Submit a workload",
            "parameters": [{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("WorkloadSpec")}},
            },
            "responses": {
                "201": _json(_ref("Workload"), "Created"),
                "200": _json(_ref("Workload"), "Already created with this Idempotency-Key"),
                "400": _ERROR,
                "422": _ERROR,
            },
        },
        "get": {
            "summary": "List workloads",
            "parameters": [
                *_PAGE_PARAMS,
                {"name": "status", "in": "query", "schema": {"type": "string"}},
                {"name": "name", "in": "query", "schema": {"type": "string"}},
                {"name": "node", "in": "query", "schema": {"type": "string"}},
                {"name": "cluster", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": _json(_list_of("Workload")), "422": _ERROR},
        },
    },
    "/v1/workloads/{id}": {
        "get": {
            "summary": "One workload with its placements",
            "parameters": [_ID],
            "responses": {"200": _json(_ref("Workload")), "404": _ERROR},
        },
        "delete": {
            "summary": "Cancel a workload (stops running replicas; idempotent)",
            "parameters": [_ID],
            "responses": {"202": _json(_ref("Workload"), "Cancellation accepted"), "404": _ERROR},
        },
    },
    "/v1/workloads/{id}/placement": {
        "get": {
            "summary": "Why each replica went where it went (chosen action, alternatives, scores)",
            "parameters": [_ID],
            "responses": {"200": _json({"type": "object"}), "404": _ERROR},
        }
    },
    "/v1/functions": {
        "post": {
            "summary": "Register a function version (same content again: 200, no new version)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("FunctionSpec")}},
            },
            "responses": {
                "201": _json(_ref("Function"), "Created"),
                "200": _json(_ref("Function"), "This content is already registered"),
                "400": _ERROR,
                "409": _ERROR,
                "422": _ERROR,
            },
        },
        "get": {"summary": "List functions", "responses": {"200": _json(_list_of("Function"))}},
    },
    "/v1/functions/{name}": {
        "get": {
            "summary": "A function: versions, instances, counts, cold-start rate, latency percentiles",
            "parameters": [_NAME],
            "responses": {"200": _json(_ref("Function")), "404": _ERROR},
        },
        "delete": {
            "summary": "Delete a function",
            "parameters": [_NAME],
            "responses": {"200": _json({}), "404": _ERROR},
        },
    },
    "/v1/functions/{name}/invoke": {
        "post": {
            "summary": "Invoke: the body is the event; the response body is the handler's JSON result",
            "parameters": [
                _NAME,
                _VERSION,
                {"name": "async", "in": "query", "schema": {"type": "string", "enum": ["1", "true"]}},
            ],
            "requestBody": {"content": {"application/json": {"schema": {}}}},
            "responses": {
                "200": {
                    "description": "The handler's result; X-Edgeplane-Cold-Start and timing headers",
                    "content": {"application/json": {"schema": {}}},
                },
                "202": _json({"type": "object"}, "Queued (async=1); poll /v1/invocations/{id}"),
                "404": _ERROR,
                "502": _ERROR,
                "503": _ERROR,
                "504": _ERROR,
            },
        }
    },
    "/v1/invocations/{id}": {
        "get": {
            "summary": "An asynchronous invocation",
            "parameters": [_ID],
            "responses": {"200": _json(_ref("Invocation")), "404": _ERROR},
        }
    },
    "/v1/events": {
        "get": {
            "summary": "The event log, oldest first; poll with after=next_after",
            "parameters": [
                {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                },
                {"name": "kind", "in": "query", "schema": {"type": "string"}},
                {"name": "object_id", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": _json({"type": "object"}), "422": _ERROR},
        }
    },
}


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "edgeplane hub API", "version": __version__},
        "paths": _PATHS,
        "components": {"schemas": _SCHEMAS},
    }
