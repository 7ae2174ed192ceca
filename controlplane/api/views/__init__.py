"""The API's response bodies, one frozen dataclass each, built from store rows (``X.of(...)``) and
written with :func:`to_json`. The OpenAPI document's response schemas are generated from these same
types (``controlplane.schema.type_schema``): each class in :data:`RESPONSE_MODELS` is the component
of its name."""

from __future__ import annotations

from typing import Any

from controlplane.api.views.base import iso, to_json
from controlplane.api.views.events import Event, EventPage, Health
from controlplane.api.views.functions import (
    Deleted,
    Function,
    FunctionCounters,
    FunctionInstance,
    FunctionList,
    Invocation,
    KeepAlive,
    Percentiles,
    Queued,
)
from controlplane.api.views.nodes import (
    Cluster,
    ClusterList,
    DeletedNode,
    JoinReply,
    Node,
    NodePage,
    NodePower,
    Revoked,
    RevokedNode,
    RevokedUnknownNode,
)
from controlplane.api.views.policies import (
    CanaryClass,
    CanaryClassSignal,
    CanaryEvent,
    CanaryGroups,
    CanarySamples,
    CanaryStatus,
    DecisionLogs,
    MissingLog,
    NodeDecisionLog,
    Policy,
    PolicyEvaluation,
    PolicyList,
    PolicyRolloutResult,
    ProfileCanaryStatus,
    SchedulingProfile,
)
from controlplane.api.views.probes import Liveness, Readiness
from controlplane.api.views.scheduling import Interference
from controlplane.api.views.workloads import (
    Placement,
    PlacementDecision,
    PlacementExplanation,
    Workload,
    WorkloadPage,
)
from controlplane.serverless.spec import FunctionSpec
from controlplane.specs.workload import WorkloadSpec
from controlplane.typeschema import type_schema

__all__ = [
    "RESPONSE_MODELS",
    "CanaryStatus",
    "Cluster",
    "ClusterList",
    "DecisionLogs",
    "Deleted",
    "DeletedNode",
    "Event",
    "EventPage",
    "Function",
    "FunctionList",
    "Health",
    "Interference",
    "Invocation",
    "JoinReply",
    "Liveness",
    "MissingLog",
    "Node",
    "NodeDecisionLog",
    "NodePage",
    "Placement",
    "PlacementExplanation",
    "Policy",
    "PolicyList",
    "PolicyRolloutResult",
    "ProfileCanaryStatus",
    "Queued",
    "Readiness",
    "Revoked",
    "RevokedNode",
    "RevokedUnknownNode",
    "SchedulingProfile",
    "Workload",
    "WorkloadPage",
    "iso",
    "response_schema",
    "response_schemas",
    "to_json",
]

RESPONSE_MODELS: tuple[type, ...] = (
    Health,
    Liveness,
    Readiness,
    Cluster,
    ClusterList,
    NodePower,
    Node,
    NodePage,
    RevokedNode,
    RevokedUnknownNode,
    DeletedNode,
    JoinReply,
    Placement,
    Workload,
    WorkloadPage,
    PlacementDecision,
    PlacementExplanation,
    FunctionInstance,
    Percentiles,
    FunctionCounters,
    KeepAlive,
    Function,
    FunctionList,
    Deleted,
    Queued,
    Invocation,
    Event,
    EventPage,
    Interference,
    PolicyEvaluation,
    Policy,
    PolicyList,
    PolicyRolloutResult,
    CanaryClass,
    CanaryClassSignal,
    CanaryEvent,
    CanaryGroups,
    CanarySamples,
    CanaryStatus,
    ProfileCanaryStatus,
    SchedulingProfile,
    NodeDecisionLog,
    MissingLog,
    DecisionLogs,
)
# The stored specs a response carries have components of their own (openapi.py adds them).
_COMPONENTS: dict[Any, str] = {
    **{model: model.__name__ for model in RESPONSE_MODELS},
    WorkloadSpec: "StoredWorkloadSpec",
    FunctionSpec: "StoredFunctionSpec",
}


def response_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of ``tp`` (a response model, or a union of them), other models as references."""
    return type_schema(tp, _COMPONENTS)


def response_schemas() -> dict[str, Any]:
    """The component schema of every response model, by class name."""
    return {model.__name__: response_schema(model) for model in RESPONSE_MODELS}
