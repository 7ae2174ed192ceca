"""The OpenAPI 3 document of the hub's API; a test checks it lists exactly the app's routes."""

from __future__ import annotations

import copy
from typing import Any

from edgeplane_contract.resources import MIG_PROFILES

from controlplane import __version__
from controlplane.api.auth import required_scope

__all__ = ["PUBLIC_OPERATIONS", "openapi_document", "operation_scope"]


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
    {
        "name": "offset",
        "in": "query",
        "schema": {"type": "integer", "minimum": 0, "maximum": 10**9, "default": 0},
    },
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


_NON_EMPTY = {"type": "string", "minLength": 1}
_CPU = {
    "oneOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
        {"type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?m?\\s*$", "example": "500m"},
    ]
}
_ENV = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "propertyNames": {"type": "string", "pattern": "^[^=]+$"},
}
# Optional seconds; null (as stored and returned) means unset.
_SECONDS = {"type": ["number", "null"], "minimum": 0.001, "maximum": 86400 * 365}


def _memory(minimum: int) -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "integer", "minimum": minimum, "maximum": 2**60},
            {
                "type": "string",
                "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*(Ki|Mi|Gi|Ti|[kKMGT])?\\s*$",
                "example": "64Mi",
            },
        ]
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
            "cpu": _CPU,
            "memory": _memory(1),
            "gpu": {"type": "integer", "minimum": 0, "maximum": 64},
            "mig": {
                "oneOf": [
                    {"type": "string", "enum": list(MIG_PROFILES)},
                    {"type": "array", "items": {"type": "string", "enum": list(MIG_PROFILES)}},
                ]
            },
            "dpu": {"type": "integer", "minimum": 0, "maximum": 64},
        },
    },
    "Affinity": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "clusters": {"type": "array", "items": _NON_EMPTY, "description": "known clusters only"},
            "regions": {"type": "array", "items": _NON_EMPTY},
            "nodes": {"type": "array", "items": _NON_EMPTY},
            "node_labels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "not in anti_affinity, nor in a function's affinity (stored there as {})",
            },
        },
    },
    "WorkloadSpec": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "command"],
        "example": {
            "name": "hello",
            "command": ["echo", "hello"],
            "resources": {"cpu": "250m", "memory": "64Mi"},
        },
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"},
            "command": {
                "type": "array",
                "prefixItems": [_NON_EMPTY],
                "items": {"type": "string"},
                "minItems": 1,
                "description": "argv; the program must be non-empty",
            },
            "env": _ENV,
            "resources": _ref("Resources"),
            "replicas": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
            "priority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0},
            "affinity": _ref("Affinity"),
            "anti_affinity": _ref("Affinity"),
            "gang": {"type": "boolean", "default": False},
            "kind": {"type": "string", "enum": ["batch", "service", "analytics", "inference"]},
            "sla_latency_s": _SECONDS,
            "timeout_s": _SECONDS,
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
            "credentials": {"type": "string", "enum": ["revoked"]},
            "last_heartbeat_at": {"type": ["string", "null"], "format": "date-time"},
        },
        "required": ["name", "cluster", "status"],
    },
    "JoinRequest": {
        "type": "object",
        "properties": {
            "token": {"type": "string", "minLength": 1, "description": "a join token (ep_join_...)"},
            "node": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,63}$"},
            "cluster": {"type": "string", "minLength": 1, "description": "must be the token's cluster"},
            "public_key": {"type": "string", "pattern": "^U[A-Z2-7]{55}$", "description": "nkey user key"},
        },
        "required": ["token", "node", "public_key"],
    },
    "JoinReply": {
        "type": "object",
        "properties": {
            "node": {"type": "string"},
            "cluster": {"type": "string"},
            "nats_url": {"type": "string"},
            "subject_prefix": {"type": "string"},
            "inbox_prefix": {"type": "string"},
        },
        "required": ["node", "cluster", "nats_url", "subject_prefix", "inbox_prefix"],
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
_VERSION = {"name": "version", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10**9}}

_SCHEMAS["FunctionSpec"] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "example": {
        "name": "echo",
        "source": "def handler(event, context):\n    return event\n",
        "handler": "handler",
    },
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$"},
        "version": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": 10**9,
            "description": "omit to get the next version (numbers of deleted versions are not reused)",
        },
        "runtime": {"type": "string", "enum": ["python", "command"], "default": "python"},
        "source": {
            "type": "string",
            "maxLength": 512 * 1024,
            "description": "Python source defining the handler (runtime python)",
        },
        "handler": {
            "type": "string",
            "pattern": "^([A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?)?$",
            "description": "a name in source, or module:function (required for runtime python)",
        },
        "path": {"type": "string", "description": "directory on the agents to import module:function from"},
        "command": {
            "type": "array",
            "items": _NON_EMPTY,
            "description": "argv (required for runtime command)",
        },
        "env": _ENV,
        "memory": _memory(16 * 2**20),
        "cpu": _CPU,
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 900, "default": 30},
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
        "gpu": {"type": "integer", "minimum": 0, "maximum": 8},
        "mig": {"type": ["string", "null"], "enum": [*MIG_PROFILES, None]},
        "sla_latency_ms": {"type": ["number", "null"], "exclusiveMinimum": 0},
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

# Links let a client (and a stateful fuzzer) follow what a POST created.
_WORKLOAD_LINKS = {
    name: {"operationId": op, "parameters": {"id": "$response.body#/id"}}
    for name, op in (("get", "getWorkload"), ("placement", "getPlacement"), ("cancel", "cancelWorkload"))
}
_FUNCTION_LINKS = {
    name: {"operationId": op, "parameters": {"name": "$response.body#/name"}}
    for name, op in (("get", "getFunction"), ("invoke", "invokeFunction"), ("delete", "deleteFunction"))
}
_STATUS = {
    "name": "status",
    "in": "query",
    "schema": {
        "type": "string",
        "enum": ["Pending", "Scheduled", "Running", "Succeeded", "Failed", "Cancelling", "Cancelled"],
    },
}

_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "health",
            "summary": "Liveness and readiness (database, NATS)",
            "responses": {"200": _json({"type": "object"}), "503": _json({"type": "object"}, "Degraded")},
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {"200": _json({"type": "object"})},
        }
    },
    "/v1/clusters": {
        "get": {
            "operationId": "listClusters",
            "summary": "Clusters of the federation",
            "responses": {"200": _json(_list_of("Cluster"))},
        }
    },
    "/v1/nodes": {
        "get": {
            "operationId": "listNodes",
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
            "operationId": "getNode",
            "summary": "One node",
            "parameters": [_NAME],
            "responses": {"200": _json(_ref("Node")), "404": _ERROR},
        },
        "delete": {
            "operationId": "revokeNode",
            "summary": "Revoke the node's NATS credentials: the server drops and refuses it",
            "parameters": [_NAME],
            "responses": {"202": _json(_ref("Node"), "Revoked"), "404": _ERROR},
        },
    },
    "/v1/join": {
        "post": {
            "operationId": "joinNode",
            "summary": "Enrol a node with a single-use join token (`controlplane agent-token create`)",
            "description": "The join token in the body is the credential: no bearer token. The node "
            "sends the public key of an nkey it made; the hub admits it on NATS and answers where "
            "and how to connect.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("JoinRequest")}},
            },
            "responses": {
                "201": _json(_ref("JoinReply"), "Enrolled"),
                "400": _ERROR,
                "403": _json(_ref("Error"), "Join token unknown, used, expired or for another cluster"),
                "409": _json(_ref("Error"), "This hub's NATS server takes anonymous clients"),
                "413": _json(_ref("Error"), "The request body is larger than 1 MiB"),
                "415": _json(_ref("Error"), "The request body is not application/json"),
                "422": _ERROR,
                "429": {
                    **_json(_ref("Error"), "Too many join attempts from this address"),
                    "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
                },
            },
        }
    },
    "/v1/nodes/{name}/decisions": {
        "get": {
            "operationId": "getNodeDecisions",
            "summary": "The node's local-policy decision log (rewards Laplace-noised on the node)",
            "parameters": [_NAME],
            "responses": {"200": _json({"type": "object"}), "404": _ERROR, "503": _ERROR},
        }
    },
    "/v1/workloads": {
        "post": {
            "operationId": "createWorkload",
            "summary": "Submit a workload",
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("WorkloadSpec")}},
            },
            "responses": {
                "201": {**_json(_ref("Workload"), "Created"), "links": _WORKLOAD_LINKS},
                "200": {
                    **_json(_ref("Workload"), "Already created with this Idempotency-Key"),
                    "links": _WORKLOAD_LINKS,
                },
                "400": _ERROR,
                "413": _json(_ref("Error"), "The body, or the run command it would become, is too large"),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "listWorkloads",
            "summary": "List workloads",
            "parameters": [
                *_PAGE_PARAMS,
                _STATUS,
                {"name": "name", "in": "query", "schema": {"type": "string"}},
                {"name": "node", "in": "query", "schema": {"type": "string"}},
                {"name": "cluster", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": _json(_list_of("Workload")), "422": _ERROR},
        },
    },
    "/v1/workloads/{id}": {
        "get": {
            "operationId": "getWorkload",
            "summary": "One workload with its placements",
            "parameters": [_ID],
            "responses": {"200": _json(_ref("Workload")), "404": _ERROR},
        },
        "delete": {
            "operationId": "cancelWorkload",
            "summary": "Cancel a workload (stops running replicas; idempotent)",
            "parameters": [_ID],
            "responses": {"202": _json(_ref("Workload"), "Cancellation accepted"), "404": _ERROR},
        },
    },
    "/v1/workloads/{id}/placement": {
        "get": {
            "operationId": "getPlacement",
            "summary": "Why each replica went where it went (chosen action, alternatives, scores)",
            "parameters": [_ID],
            "responses": {"200": _json({"type": "object"}), "404": _ERROR},
        }
    },
    "/v1/functions": {
        "post": {
            "operationId": "registerFunction",
            "summary": "Register a function version (same content again: 200, no new version)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("FunctionSpec")}},
            },
            "responses": {
                "201": {**_json(_ref("Function"), "Created"), "links": _FUNCTION_LINKS},
                "200": {
                    **_json(_ref("Function"), "This content is already registered"),
                    "links": _FUNCTION_LINKS,
                },
                "400": _ERROR,
                "409": _ERROR,
                "413": _json(_ref("Error"), "The body, or the code every invocation carries, is too large"),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "listFunctions",
            "summary": "List functions",
            "responses": {"200": _json(_list_of("Function"))},
        },
    },
    "/v1/functions/{name}": {
        "get": {
            "operationId": "getFunction",
            "summary": "A function: versions, instances, counts, cold-start rate, latency percentiles",
            "parameters": [_NAME],
            "responses": {"200": _json(_ref("Function")), "404": _ERROR},
        },
        "delete": {
            "operationId": "deleteFunction",
            "summary": "Delete a function (every version; later versions get new numbers)",
            "parameters": [_NAME],
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "deleted": {"type": "boolean"}},
                        "required": ["name", "deleted"],
                    }
                ),
                "404": _ERROR,
            },
        },
    },
    "/v1/functions/{name}/invoke": {
        "post": {
            "operationId": "invokeFunction",
            "summary": "Invoke: the body is the event; the response body is the handler's JSON result",
            "parameters": [
                _NAME,
                _VERSION,
                {"name": "async", "in": "query", "schema": {"type": "string", "enum": ["1", "true"]}},
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "description": "a retry with the same key is the same invocation: nothing runs again",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 128},
                },
            ],
            "requestBody": {"content": {"application/json": {"schema": {}}}},
            "responses": {
                "200": {
                    "description": "The handler's result (X-Edgeplane-Cold-Start and timing headers; "
                    "X-Edgeplane-Idempotent-Replay on a retry with the same Idempotency-Key), or for "
                    "async=1 with a key already used, that invocation (as for 202)",
                    "content": {"application/json": {"schema": {}}},
                },
                "202": {
                    **_json(
                        {
                            "type": "object",
                            "properties": {
                                "invocation_id": {"type": "string"},
                                "status": {"type": "string"},
                                "poll": {"type": "string"},
                            },
                            "required": ["invocation_id", "status"],
                        },
                        "Queued (async=1); poll /v1/invocations/{id}",
                    ),
                    "links": {
                        "poll": {
                            "operationId": "getInvocation",
                            "parameters": {"id": "$response.body#/invocation_id"},
                        }
                    },
                },
                "400": _ERROR,
                "404": _ERROR,
                "409": _json(_ref("Error"), "An invocation with this Idempotency-Key is still running"),
                "413": _json(_ref("Error"), "The event does not fit in one NATS message with the code"),
                "422": _ERROR,
                "502": _json(
                    _ref("Error"),
                    "The handler failed, or its result is not strict JSON (code bad_result: NaN, Infinity) "
                    "or too large for one NATS message (code result_too_large)",
                ),
                "503": _ERROR,
                "504": _ERROR,
            },
        }
    },
    "/v1/invocations/{id}": {
        "get": {
            "operationId": "getInvocation",
            "summary": "An asynchronous invocation",
            "parameters": [_ID],
            "responses": {"200": _json(_ref("Invocation")), "404": _ERROR},
        }
    },
    "/v1/events": {
        "get": {
            "operationId": "listEvents",
            "summary": "The event log, oldest first; poll with after=next_after",
            "parameters": [
                {
                    "name": "after",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**62},
                },
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

# Routes anyone may call (liveness probes); every other operation needs a bearer token.
PUBLIC_OPERATIONS = frozenset({("get", "/healthz"), ("post", "/v1/join")})
_SCOPE_TEXT = "Requires a bearer token with scope `{scope}` (`admin` implies every scope)."
_AUTH_RESPONSES = {
    "401": {
        **_json(_ref("Error"), "No token, or one unknown, expired or revoked"),
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    },
    "403": _json(_ref("Error"), "The token lacks the scope this operation needs"),
    "429": {
        **_json(_ref("Error"), "The token's rate limit is exceeded"),
        "headers": {
            "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer", "minimum": 1}}
        },
    },
}
_BODY_RESPONSES = {
    "413": _json(_ref("Error"), "The request body is larger than 1 MiB"),
    "415": _json(_ref("Error"), "The request body is not application/json"),
}


def operation_scope(method: str, path: str) -> str | None:
    """The scope an operation needs as documented (None: public), from the auth middleware's map."""
    if (method.lower(), path) in PUBLIC_OPERATIONS:
        return None
    return required_scope(method.upper(), path)


def _secured(path: str, method: str, operation: dict[str, Any]) -> dict[str, Any]:
    """The operation with what authentication adds: its scope, and the 401/403/429 (413/415) answers."""
    operation = copy.deepcopy(operation)
    scope = operation_scope(method, path)
    if scope is None:
        operation["security"] = []
        return operation
    operation["x-required-scope"] = scope
    text = _SCOPE_TEXT.format(scope=scope)
    operation["description"] = f"{operation['description']}\n\n{text}" if "description" in operation else text
    responses = operation["responses"]
    for status, response in _AUTH_RESPONSES.items():
        responses.setdefault(status, copy.deepcopy(response))
    # The auth middleware refuses any mutating request's body that is not JSON, read or not.
    if method in ("post", "put", "patch", "delete"):
        responses.setdefault("415", copy.deepcopy(_BODY_RESPONSES["415"]))
    if "requestBody" in operation:
        responses.setdefault("413", copy.deepcopy(_BODY_RESPONSES["413"]))
    return operation


def openapi_document() -> dict[str, Any]:
    """The document served at /openapi.json (a fresh copy: callers may change it)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "edgeplane hub API", "version": __version__},
        "security": [{"bearer": []}],
        "paths": {
            path: {method: _secured(path, method, op) for method, op in operations.items()}
            for path, operations in _PATHS.items()
        },
        "components": {
            "schemas": copy.deepcopy(_SCHEMAS),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API token (`controlplane token create`); scopes: read, workloads, "
                    "functions, nodes, admin",
                }
            },
        },
    }
