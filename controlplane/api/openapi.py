"""The OpenAPI 3 document of the hub's API: paths, operations and security, written here; every
body and parameter schema comes from what parses it (the request models, ``api/params.py``), and
every response schema from the typed model the route answers with (``api/views``), but the few
bodies no model of ours describes (marked where they are). A test checks the document lists
exactly the app's routes. About 400 lines: most of it is the table of operations, one per route."""

from __future__ import annotations

import copy
from typing import Any, Protocol

from controlplane import __version__
from controlplane.api import console, enrol, logs, params, views
from controlplane.api.auth import required_scope
from controlplane.api.errors import ERROR_SCHEMA
from controlplane.policies.decision_logs import DECISION_LOG_REQUEST
from controlplane.policies.profile_canary import PROFILE_CANARY
from controlplane.policies.upload import CANARY, POLICY_ROLLBACK, POLICY_ROLLOUT, POLICY_UPLOAD
from controlplane.schema import Model
from controlplane.serverless.spec import FUNCTION, FunctionSpec
from controlplane.specs.workload import (
    AFFINITY,
    AFFINITY_WITHOUT_LABELS,
    ANTI_AFFINITY,
    RESOURCES,
    WORKLOAD,
    WorkloadSpec,
)
from controlplane.typeschema import type_schema

__all__ = ["PUBLIC_OPERATIONS", "openapi_document", "operation_scope"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _model(tp: type) -> dict[str, str]:
    """A reference to a response model's component (named after its class)."""
    return _ref(tp.__name__)


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "Error (the field names what was wrong)")


class _Parameter(Protocol):
    def parameter(self) -> dict[str, Any]: ...


def _params(*declared: _Parameter) -> list[dict[str, Any]]:
    return [p.parameter() for p in declared]


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_VERSION = {
    "name": "version",
    "in": "path",
    "required": True,
    "description": "a version number, or v<number>",
    "schema": {"type": "string", "pattern": "^v?[0-9]+$"},
}

# Links let a client (and a stateful fuzzer) follow what a POST created.
_LOG_RESPONSES = {
    "200": {
        "description": "The log as UTF-8 text (bytes that are not UTF-8 read as U+FFFD)",
        "headers": {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in logs.LOG_HEADERS.items()
        },
        "content": {"text/plain": {"schema": {"type": "string"}}},
    },
    "404": _ERROR,
    "422": _ERROR,
    "503": _json(_ref("Error"), "The node that keeps the log did not answer"),
}
_WORKLOAD_LINKS = {
    name: {"operationId": op, "parameters": {"id": "$response.body#/id"}}
    for name, op in (("get", "getWorkload"), ("placement", "getPlacement"), ("cancel", "cancelWorkload"))
}
_FUNCTION_LINKS = {
    name: {"operationId": op, "parameters": {"name": "$response.body#/name"}}
    for name, op in (("get", "getFunction"), ("invoke", "invokeFunction"), ("delete", "deleteFunction"))
}
_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "operationId": "health",
            "summary": "Liveness and readiness (database, NATS)",
            "responses": {"200": _json(_model(views.Health)), "503": _json(_model(views.Health), "Degraded")},
        }
    },
    "/livez": {
        "get": {
            "operationId": "liveness",
            "summary": "Liveness: the process and its event loop answer (calls no store or bus)",
            "responses": {"200": _json(_model(views.Liveness))},
        }
    },
    "/readyz": {
        "get": {
            "operationId": "readiness",
            "summary": "Readiness: database readable and writable, NATS connected, hub started",
            "responses": {
                "200": _json(_model(views.Readiness)),
                "503": _json(_model(views.Readiness), "Not ready: `down` names the parts that are down"),
            },
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            # Hand-written: its schema is OpenAPI's own meta-schema, not one of ours.
            "responses": {"200": _json({"type": "object"})},
        }
    },
    "/metrics": {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics (docs/metrics.md); public with --public-metrics",
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        }
    },
    "/v1/clusters": {
        "get": {
            "operationId": "listClusters",
            "summary": "Clusters of the federation",
            "responses": {"200": _json(_model(views.ClusterList))},
        }
    },
    "/v1/nodes": {
        "get": {
            "operationId": "listNodes",
            "summary": "Edge nodes",
            "parameters": _params(params.LIMIT, params.OFFSET, params.CLUSTER, params.NODE_STATUS),
            "responses": {"200": _json(_model(views.NodePage)), "422": _ERROR},
        }
    },
    "/v1/nodes/{name}": {
        "get": {
            "operationId": "getNode",
            "summary": "One node",
            "parameters": [_NAME],
            "responses": {"200": _json(_model(views.Node)), "404": _ERROR},
        },
        "delete": {
            "operationId": "revokeNode",
            "summary": "Revoke the node's NATS credentials: the server drops and refuses it; with "
            "forget=true, delete the node",
            "description": "Without `forget`: its key revoked (202); it goes NotReady. With "
            "`forget=true`: the node deleted (200): its active placements end Lost and are placed "
            "again, its key is revoked (a new join enrols it afresh), the hub no longer lists it "
            "(its events stay). A Ready node is refused (409, nothing done) unless `force=true`.",
            "parameters": [_NAME, *_params(params.FORGET, params.FORCE)],
            "responses": {
                "200": _json(_model(views.DeletedNode), "Deleted (forget=true)"),
                "202": _json(views.response_schema(views.Revoked), "Revoked"),
                "404": _ERROR,
                "409": _json(_ref("Error"), "forget=true of a Ready node without force=true"),
            },
        },
    },
    "/v1/join": {
        "post": {
            "operationId": "joinNode",
            "summary": "Enrol a node with a single-use join token (`controlplane agent-token create`)",
            "description": "The join token in the body is the credential: no bearer token. The node "
            "sends the public key of an nkey it made; the hub admits it on NATS and answers where "
            "and how to connect. A name that is enrolled is refused (409; the token stays unused) "
            'unless `"replace": true` comes with a bearer token with the `admin` scope.',
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("JoinRequest")}},
            },
            "responses": {
                "201": _json(_model(views.JoinReply), "Enrolled"),
                "400": _ERROR,
                "403": _json(
                    _ref("Error"),
                    "Join token unknown, used, expired, for another cluster or bound to another "
                    "node; a replace without a bearer token with the admin scope",
                ),
                "409": _json(
                    _ref("Error"),
                    "The node is enrolled (an admin re-keys it), or this hub's NATS server takes "
                    "anonymous clients",
                ),
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
            # The node's answer, checked (the node it names, epsilon, entries): a malformed one
            # is a 503, counted, never handed on.
            "responses": {"200": _json(_model(views.NodeDecisionLog)), "404": _ERROR, "503": _ERROR},
        }
    },
    "/v1/workloads": {
        "post": {
            "operationId": "createWorkload",
            "summary": "Submit a workload",
            "parameters": _params(params.IDEMPOTENCY_KEY),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("WorkloadSpec")}},
            },
            "responses": {
                "201": {**_json(_model(views.Workload), "Created"), "links": _WORKLOAD_LINKS},
                "200": {
                    **_json(_model(views.Workload), "Already created with this Idempotency-Key"),
                    "links": _WORKLOAD_LINKS,
                },
                "400": _ERROR,
                "413": _json(_ref("Error"), "The body, or the run command it would become, is too large"),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "listWorkloads",
            "summary": "List workloads, newest first",
            "parameters": _params(
                params.LIMIT,
                params.CONTINUE,
                params.OFFSET,
                params.WORKLOAD_STATUS,
                params.NAME,
                params.NODE,
                params.CLUSTER,
            ),
            "responses": {
                "200": _json(_model(views.WorkloadPage)),
                "400": _json(_ref("Error"), "The continue token is not one this list answered"),
                "422": _ERROR,
            },
        },
    },
    "/v1/workloads/{id}": {
        "get": {
            "operationId": "getWorkload",
            "summary": "One workload with its placements",
            "parameters": [_ID],
            "responses": {"200": _json(_model(views.Workload)), "404": _ERROR},
        },
        "delete": {
            "operationId": "cancelWorkload",
            "summary": "Cancel a workload (stops running replicas; idempotent)",
            "parameters": [_ID],
            "responses": {"202": _json(_model(views.Workload), "Cancellation accepted"), "404": _ERROR},
        },
    },
    "/v1/workloads/{id}/placement": {
        "get": {
            "operationId": "getPlacement",
            "summary": "Why each replica went where it went (chosen action, alternatives, scores)",
            "parameters": [_ID],
            "responses": {"200": _json(_model(views.PlacementExplanation)), "404": _ERROR},
        }
    },
    "/v1/workloads/{id}/logs": {
        "get": {
            "operationId": "getWorkloadLogs",
            "summary": "A replica's output, from the node that keeps it (tail=N lines; follow=1 streams "
            "until the replica ends)",
            "parameters": [
                _ID,
                *_params(logs.REPLICA, logs.TAIL, logs.FOLLOW, logs.LIMIT_BYTES),
            ],
            "responses": _LOG_RESPONSES,
        }
    },
    "/v1/functions/{name}/instances/{instance}/logs": {
        "get": {
            "operationId": "getFunctionInstanceLogs",
            "summary": "A running function instance's stderr (what the handler printed), from its node",
            "parameters": [
                _NAME,
                {"name": "instance", "in": "path", "required": True, "schema": {"type": "string"}},
                *_params(logs.TAIL, logs.FOLLOW, logs.LIMIT_BYTES),
            ],
            "responses": _LOG_RESPONSES,
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
                "201": {**_json(_model(views.Function), "Created"), "links": _FUNCTION_LINKS},
                "200": {
                    **_json(_model(views.Function), "This content is already registered"),
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
            "responses": {"200": _json(_model(views.FunctionList))},
        },
    },
    "/v1/functions/{name}": {
        "get": {
            "operationId": "getFunction",
            "summary": "A function: versions, instances, counts, cold-start rate, latency percentiles",
            "parameters": [_NAME],
            "responses": {"200": _json(_model(views.Function)), "404": _ERROR},
        },
        "delete": {
            "operationId": "deleteFunction",
            "summary": "Delete a function (every version; later versions get new numbers)",
            "parameters": [_NAME],
            "responses": {
                "200": _json(_model(views.Deleted)),
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
                *_params(params.VERSION, params.ASYNC, params.INVOKE_IDEMPOTENCY_KEY),
            ],
            "requestBody": {"content": {"application/json": {"schema": {}}}},
            "responses": {
                # Hand-written: the handler's result is any JSON (or, for async=1, a Queued).
                "200": {
                    "description": "The handler's result (X-Edgeplane-Cold-Start and timing headers; "
                    "X-Edgeplane-Idempotent-Replay on a retry with the same Idempotency-Key), or for "
                    "async=1 with a key already used, that invocation (as for 202)",
                    "content": {"application/json": {"schema": {}}},
                },
                "202": {
                    **_json(_model(views.Queued), "Queued (async=1); poll /v1/invocations/{id}"),
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
            "responses": {"200": _json(_model(views.Invocation)), "404": _ERROR},
        }
    },
    "/v1/events": {
        "get": {
            "operationId": "listEvents",
            "summary": "The event log, oldest first; poll with after=next_after",
            "parameters": _params(params.AFTER, params.EVENTS_LIMIT, params.KIND, params.OBJECT_ID),
            "responses": {"200": _json(_model(views.EventPage)), "422": _ERROR},
        }
    },
    "/v1/decision-logs": {
        "post": {
            "operationId": "collectDecisionLogs",
            "summary": "Collect the Ready nodes' decision logs now (for retraining the local policy): "
            "each node's newest entries, rewards Laplace-noised by the node for its own epsilon; "
            "nodes that gave none are listed with the reason",
            "requestBody": {"content": {"application/json": {"schema": _ref("DecisionLogRequest")}}},
            "responses": {"200": _json(_model(views.DecisionLogs)), "400": _ERROR, "422": _ERROR},
        }
    },
    "/v1/policies": {
        "post": {
            "operationId": "uploadPolicy",
            "summary": "Upload a local-policy model as a new version, after its checks (it loads as agents "
            "load it; it agrees with the version in force on held-out decisions; the same model "
            "again: 200, no new version)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("PolicyUpload")}},
            },
            "responses": {
                "201": _json(_model(views.Policy), "Created"),
                "200": _json(_model(views.Policy), "This model is already a version"),
                "400": _ERROR,
                "413": _json(_ref("Error"), "The body is larger than the API takes"),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "listPolicies",
            "summary": "Every policy version, oldest first",
            "responses": {"200": _json(_model(views.PolicyList))},
        },
    },
    "/v1/policies/{version}": {
        "get": {
            "operationId": "getPolicy",
            "summary": "A policy version: checksum, state, its upload check",
            "parameters": [_VERSION],
            "responses": {"200": _json(_model(views.Policy)), "404": _ERROR, "422": _ERROR},
        }
    },
    "/v1/policies/{version}/rollout": {
        "post": {
            "operationId": "rolloutPolicy",
            "summary": "Run a version on some nodes (a canary): named nodes, whole clusters, or a stable "
            "percent of all nodes; the hub brings them to it within seconds",
            "parameters": [_VERSION],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("PolicyRollout")}},
            },
            "responses": {
                "200": _json(_model(views.PolicyRolloutResult)),
                "400": _ERROR,
                "404": _ERROR,
                "409": _json(_ref("Error"), "The version was rolled back, or the hub cannot sign versions"),
                "422": _ERROR,
            },
        }
    },
    "/v1/policies/{version}/canary": {
        "post": {
            "operationId": "startPolicyCanary",
            "summary": "Start a live canary: the version goes to a growing share of nodes, step by step, "
            "and is promoted after the last step or rolled back when its nodes' decisions are "
            "anomalous against the others' (one canary at a time)",
            "parameters": [_VERSION],
            "requestBody": {"content": {"application/json": {"schema": _ref("CanaryRequest")}}},
            "responses": {
                "201": _json(_model(views.CanaryStatus), "Started"),
                "400": _ERROR,
                "404": _ERROR,
                "409": _json(
                    _ref("Error"), "Another canary runs, the version is not available, or the hub cannot sign"
                ),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "getPolicyCanary",
            "summary": "The version's canary: state, share, scores, timeline (one that ended under an "
            "earlier hub: as the store kept it, without scores)",
            "parameters": [_VERSION],
            "responses": {"200": _json(_model(views.CanaryStatus)), "404": _ERROR, "422": _ERROR},
        },
    },
    "/v1/scheduling-profiles/current": {
        "get": {
            "operationId": "getSchedulingProfile",
            "summary": "The placement profile in force, and the candidate of a profile canary running",
            "responses": {"200": _json(_model(views.SchedulingProfile)), "404": _ERROR},
        }
    },
    "/v1/scheduling-profiles/canary": {
        "post": {
            "operationId": "startProfileCanary",
            "summary": "Roll a placement profile change out as a canary: a growing share of new workloads "
            "is placed with the candidate profile, which is promoted after the last step or reverted "
            "when its placement delays are anomalous against the others' (one at a time)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("ProfileCanaryRequest")}},
            },
            "responses": {
                "201": _json(_model(views.ProfileCanaryStatus), "Started"),
                "400": _ERROR,
                "409": _json(_ref("Error"), "A profile canary runs, or this hub's placer takes none"),
                "422": _ERROR,
            },
        },
        "get": {
            "operationId": "getProfileCanary",
            "summary": "The last profile canary of this hub: state, share, scores, timeline",
            "responses": {"200": _json(_model(views.ProfileCanaryStatus)), "404": _ERROR},
        },
    },
    "/v1/policies/{version}/promote": {
        "post": {
            "operationId": "promotePolicy",
            "summary": "Make a version the fleet's: every node without a canary assignment runs it",
            "parameters": [_VERSION],
            "responses": {
                "200": _json(_model(views.Policy)),
                "404": _ERROR,
                "409": _json(_ref("Error"), "The version was rolled back, or the hub cannot sign versions"),
                "422": _ERROR,
            },
        }
    },
    "/v1/policies/{version}/rollback": {
        "post": {
            "operationId": "rollbackPolicy",
            "summary": "Take a version off every node (its canaries go back to the fleet's version; "
            "if it was the fleet's, the fleet goes back to the shipped model)",
            "parameters": [_VERSION],
            "requestBody": {"content": {"application/json": {"schema": _ref("PolicyRollback")}}},
            "responses": {
                "200": _json(_model(views.Policy)),
                "400": _ERROR,
                "404": _ERROR,
                "422": _ERROR,
            },
        }
    },
    "/v1/scheduler/interference": {
        "get": {
            "operationId": "getInterference",
            "summary": "The interference estimate learned from agents' observed runtimes",
            "responses": {"200": _json(_model(views.Interference))},
        }
    },
    **console.OPENAPI_PATHS,
}

# Routes anyone may call (liveness probes); every other operation needs a bearer token.
PUBLIC_OPERATIONS = frozenset(
    {("get", "/healthz"), ("get", "/livez"), ("get", "/readyz"), ("post", "/v1/join")}
) | {(method.lower(), path) for method, path in console.PUBLIC_ROUTES if method != "HEAD"}
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
    # Every authenticated request reads the store (its token): a store that is away or cannot
    # write (database down, disk full) is a 503 with Retry-After, never a 500.
    "503": {
        **_json(
            _ref("Error"),
            "The store is unavailable, or (through a standby) no hub leads now (code `unavailable`: "
            "nothing was done); or a standby's leader went away before answering (code "
            "`leader_lost`: it may have been done, so retry with the same Idempotency-Key). Retry "
            "after Retry-After",
        ),
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
    """The operation with what authentication adds: its scope, and the 401/403/429/503 (413/415)
    answers."""
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


_REQUEST_MODELS: tuple[Model[Any], ...] = (
    WORKLOAD,
    RESOURCES,
    AFFINITY,
    AFFINITY_WITHOUT_LABELS,
    ANTI_AFFINITY,
    FUNCTION,
    POLICY_UPLOAD,
    POLICY_ROLLOUT,
    DECISION_LOG_REQUEST,
    POLICY_ROLLBACK,
    CANARY,
    PROFILE_CANARY,
)


def _schemas() -> dict[str, Any]:
    """Every component schema: request bodies from their models (the join body hand-written beside
    its parser), the specs as stored and returned from their dataclasses, responses from theirs."""
    return {
        "Error": copy.deepcopy(ERROR_SCHEMA),
        **{model.name: model.schema() for model in _REQUEST_MODELS},
        "StoredWorkloadSpec": type_schema(WorkloadSpec),
        "StoredFunctionSpec": type_schema(FunctionSpec),
        "JoinRequest": copy.deepcopy(enrol.JOIN_REQUEST_SCHEMA),
        **views.response_schemas(),
    }


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
            "schemas": _schemas(),
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
