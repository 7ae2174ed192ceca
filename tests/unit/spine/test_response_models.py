"""Every response body is a typed model whose OpenAPI component is generated from it: each model
renders a sample (from store rows, as the routes do) that validates against the served document,
and no response schema is hand-written but the three that no model of ours can describe."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest

from edgeplane_contract.messages import FunctionInstance as ReportedInstance

from controlplane.api import views
from controlplane.api.openapi import _REQUEST_MODELS, openapi_document
from controlplane.hub.forget import ForgottenNode
from controlplane.rollout.controller import CanaryController, RolloutConfig
from controlplane.scheduling.interference import InterferenceEstimate, InterferenceEstimator, LoadProfile
from controlplane.scheduling.sla_risk import SlaRiskEstimator, SlaRiskTable
from controlplane.serverless.estimates import FunctionStats
from controlplane.serverless.spec import FunctionSpec
from controlplane.serverless.window import Window
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.models import (
    ClusterRow,
    EventRow,
    InvocationRow,
    NodeRow,
    PlacementRow,
    PolicyRow,
    WorkloadRow,
)
from controlplane.typeschema import StoredAs, type_schema

jsonschema_rs = pytest.importorskip("jsonschema_rs")

DOC = openapi_document()
# The response schemas written by hand, and why: none of our types describes these bodies.
HAND_WRITTEN = {
    ("get", "/openapi.json", "200"),  # this document: OpenAPI's own meta-schema
    ("post", "/v1/functions/{name}/invoke", "200"),  # the handler's result: any JSON
}


def _placement(**changes: Any) -> PlacementRow:
    values: dict[str, Any] = {
        "id": "p1",
        "replica": 0,
        "attempt": 1,
        "node": "n1",
        "cluster": "c1",
        "status": "Running",
        "exit_code": None,
        "message": "",
        "restarts": None,  # before the column's server default
        "assignment": {"cpu": 1.0},
        "explanation": {"chosen": "n1", "alternatives": []},
        "scheduled_at": 1_700_000_000.0,
        "started_at": None,
        "finished_at": None,
    }
    return PlacementRow(**{**values, **changes})


def _node() -> NodeRow:
    return NodeRow(
        name="n1",
        cluster="c1",
        status="Ready",
        node_type="edge",
        labels={"zone": "a"},
        resources={"cpu": 4.0, "memory": 1024},
        telemetry={"weights": [0.4, 0.3, 0.2, 0.1], "cpu_percent": 12.5},
        power_source="battery",
        battery_percent=None,
        heartbeat_interval_s=2.0,
        isolation=None,
        agent_version="1.0",
        registered_at=1_700_000_000.0,
        last_heartbeat_at=1_700_000_002.5,
    )


async def _samples() -> dict[type, list[Any]]:
    """At least one sample of every response model, rendered as the routes render them."""
    controller = CanaryController(RolloutConfig(steps=(0.5, 1.0), dwell_s=0, min_samples=1, recent=1))
    controller.observe("control", 0.1, 1.0)
    controller.observe("canary", 0.05, 2.0)
    entry = {
        "t": 1.5,
        "request_id": "r1",
        "workload_id": "w1",
        "replica": 0,
        "state": {"cpu_free": 2.0},
        "offer": {"cpu": 0.5},
        "weights": [1.0, 2.0, 1.0, 4.0],
        "action": 3,
        "decline": False,
        "expected_reward": -3.25,
        "source": "onnx",
        "purpose": "bid",
    }
    logs = views.DecisionLogs(
        nodes=[views.NodeDecisionLog("n1", 0.1, False, [entry]), views.NodeDecisionLog("n2", 1.0, True, [])],
        missing=[views.MissingLog("n3", "no answer within 5 s")],
        entries=1,
    )
    canary = views.CanaryStatus.of(
        {
            "version": 3,
            **controller.describe(),
            "scores": {"canary": 0.0, "control": 0.0},
            "outcome_scores": {"canary": 0.0, "control": 0.0},
            "outcome_samples": {"canary": 2, "control": 5},
            "drain_scores": {"canary": 0.0, "control": 0.0},
            "drain_samples": {"canary": 0, "control": 3},
            "energy_scores": {"canary": 1.5, "control": 0.0},
            "energy_samples": {"canary": 4, "control": 6},
            "classes": [],
            "nodes": ["n1"],
            "failure": "",
        }
    )
    policy = views.Policy.of(
        PolicyRow(
            version=2,
            sha256="ab" * 32,
            size=68_000,
            model=b"",
            meta={"feature_schema_version": 2},
            description="retrained",
            evaluation={
                "agreement": 0.93,
                "mean_reward": 0.31,
                "reference_mean_reward": 0.3,
                "reference": "v1",
                "cases": 512,
                "seeds": [10900, 10901],
            },
            created_at=1_700_000_000.0,
            created_by="admin",
            state="promoted",
        )
    )
    workload = WorkloadRow(
        id="w1",
        name="job",
        status="Running",
        message="",
        spec=WorkloadSpec(name="job", command=["true"], env={"A": "1"}).to_dict(),
        replicas=2,
        priority=0,
        created_at=1_700_000_000.0,
        updated_at=1_700_000_001.0,
        finished_at=None,
    )
    placements = [
        _placement(),
        _placement(id="p2", replica=1, status="Failed", exit_code=2, restarts=1, finished_at=1.7e9 + 9),
    ]
    node = views.Node.of(_node(), region="eu", allocated={"cpu": 1.0})
    stats = FunctionStats()
    stats.record("n1", cold=True, latency_ms=12.0, cold_ms=300.0, ok=True, timeout=False)
    spec = FunctionSpec.parse(
        {"name": "echo", "source": "def handle(e, c):\n    return e\n", "handler": "handle"}
    )
    spec.version = 3
    instance = ReportedInstance(instance_id="i1", function="echo", version=3, state="idle", started_at=1.0)
    functions = SimpleNamespace(
        resolve=lambda name: spec,
        specs={"echo": {3: spec}},
        instances={"n1": {"i1": instance}},
        stats={"echo": stats},
        policy=SimpleNamespace(
            name="fixed", keepalive=SimpleNamespace(release_window=lambda name, t: Window(0.0, 600.0))
        ),
    )
    function = views.Function.of(functions, "echo")  # type: ignore[arg-type]
    invocation = InvocationRow(
        id="i1",
        function="echo",
        version=3,
        status="Succeeded",
        node="n1",
        cold_start=True,
        result={"value": [1, "x"]},
        error={},
        timings={"total_ms": 3.0},
        created_at=1_700_000_000.0,
        finished_at=1_700_000_000.5,
    )
    queued = InvocationRow(
        id="i2", function="echo", version=3, status="Queued", node=None, cold_start=None, result={},
        error={}, timings={}, created_at=1_700_000_000.0, finished_at=None,
    )  # fmt: skip
    cluster = views.Cluster.of(ClusterRow(name="c1", region="eu", status="Available"), {"Ready": 1})
    event = views.Event.of(
        EventRow(
            id=7,
            ts=1_700_000_000.0,
            kind="node.ready",
            object_kind="node",
            object_id="n1",
            message="",
            data={},
        )
    )
    rendered = [
        views.Health("ok", True, True, "hub1", {"heartbeat": 1}, {}),
        views.Liveness("ok"),
        views.Readiness("unavailable", True, False, True, ["nats"]),
        cluster,
        views.ClusterList([cluster], 1),
        node,
        views.NodePage([node], 1, 50, 0),
        views.RevokedNode.of_node(node),
        views.RevokedUnknownNode(name="n9", credentials="revoked"),
        views.DeletedNode.of(ForgottenNode("n1", "c1", "NotReady", False, True, ["p1"])),
        views.JoinReply("n1", "c1", "nats://hub:4222", "ep.c1", "_INBOX.c1.n1", "U" + "A" * 55),
        views.Workload.of(workload, placements),
        views.Workload.of(workload, []),
        views.WorkloadPage([views.Workload.of(workload, placements[:1])], 2, 1, 0, "WzEsMS4wLCJ3MSJd"),
        views.WorkloadPage([], 0, 50, 0, None),
        views.PlacementExplanation.of(workload, placements),
        function,
        views.FunctionList([function], 1),
        views.Deleted("echo", True),
        views.Queued("i2", "Queued", "/v1/invocations/i2"),
        views.Invocation.of(invocation),
        views.Invocation.of(queued),
        event,
        views.EventPage([event], 7, 100),
        views.Interference.of(_learned(), {"learned": 1, "invalid": 0}),
        views.Interference.of(None, {}),
        views.Interference.of(_learned(), {"learned": 30}, _risk()),
        policy,
        views.PolicyList([policy], 1),
        views.PolicyRolloutResult(version=2, nodes=["n1", "n2"], changed=["n2"]),
        canary,
        logs,
        profile_canary := views.ProfileCanaryStatus.of(
            {
                "profile": "default",
                "previous": "edgeplane",
                **controller.describe(),
                "scores": {"canary": 0.5, "control": 0.0},
                "outcome_samples": {"canary": 3, "control": 4},
                "outcome_scores": {"canary": 1.5, "control": 0.0},
                "classes": [
                    {
                        "name": "inference",
                        "signals": [
                            {
                                "signal": "delay",
                                "samples": {"canary": 3, "control": 5},
                                "scores": {"canary": 2.0, "control": 0.0},
                            },
                            {
                                "signal": "outcomes",
                                "samples": {"canary": 0, "control": 0},
                                "scores": {"canary": 0.0, "control": 0.0},
                            },
                        ],
                    }
                ],
                "failure": "",
            }
        ),
        views.SchedulingProfile("edgeplane", {"name": "edgeplane", "plugins": []}, None, "started"),
        views.SchedulingProfile("edgeplane", {"name": "edgeplane"}, "default", "promoted"),
    ]
    nested = [
        *logs.nodes,
        *logs.missing,
        policy.evaluation,
        canary.samples,
        canary.scores,
        *canary.events,
        *profile_canary.classes,
        *profile_canary.classes[0].signals,
        node.power,
        *views.Workload.of(workload, placements).placements,
        function.stats,
        function.policy,
    ]
    nested += [*function.instances, function.stats.latency_ms]
    nested += views.PlacementExplanation.of(workload, placements).decisions
    out: dict[type, list[Any]] = {}
    for sample in rendered + nested:
        out.setdefault(type(sample), []).append(sample)
    return out


def _risk() -> SlaRiskTable:
    risk = SlaRiskEstimator()
    risk.observe("function", 1.0, 2.0, LoadProfile([0.0] * 9 + [2.0]))
    return risk.table()


def _learned() -> InterferenceEstimate:
    estimator = InterferenceEstimator()
    estimator.observe("batch", 1.0, 2.0, LoadProfile([0.0] * 9 + [2.0]))
    return estimator.estimate()


def _validator(component: str) -> Any:
    return jsonschema_rs.validator_for(
        {"$ref": f"#/components/schemas/{component}", "components": DOC["components"]}
    )


async def test_every_response_model_renders_a_sample_the_generated_schema_accepts():
    samples = await _samples()
    assert set(samples) == set(views.RESPONSE_MODELS)
    for model, rendered in samples.items():
        assert DOC["components"]["schemas"][model.__name__] == views.response_schema(model)
        for sample in rendered:
            body = json.loads(json.dumps(views.to_json(sample), allow_nan=False))
            errors = [str(e) for e in _validator(model.__name__).iter_errors(body)]
            assert not errors, (model.__name__, body, errors)
            # Every field is always written, so the schema may require them all.
            assert list(body) == DOC["components"]["schemas"][model.__name__]["required"]


async def test_the_schemas_catch_what_the_types_rule_out():
    samples = await _samples()
    workload = views.to_json(samples[views.Workload][0])
    for bad in ({"status": "Sleeping"}, {"created_at": None}, {"placements": [{"status": "Gone"}]}):
        assert not _validator("Workload").is_valid({**workload, **bad}), bad
    revoked = DOC["paths"]["/v1/nodes/{name}"]["delete"]["responses"]["202"]["content"]
    validator = jsonschema_rs.validator_for({**revoked["application/json"]["schema"], **DOC})
    assert validator.is_valid(views.to_json(views.RevokedUnknownNode(name="n", credentials="revoked")))
    assert not validator.is_valid({"name": "n"})


def test_no_response_schema_is_hand_written_but_those_no_type_describes():
    generated = {f"#/components/schemas/{m.__name__}" for m in views.RESPONSE_MODELS}
    generated.add("#/components/schemas/Error")  # written by hand beside error_body (api/errors.py)
    hand_written = set()
    for path, operations in DOC["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if "application/json" not in response["content"]:
                    # logs (text, as the node keeps them) and the console's static files
                    assert set(response["content"]) <= {
                        "text/plain",
                        "text/html",
                        "text/javascript",
                        "text/css",
                    }
                    continue
                schema = response["content"]["application/json"]["schema"]
                refs = [s.get("$ref") for s in schema.get("anyOf", [schema])]
                if not all(ref in generated for ref in refs):
                    hand_written.add((method, path, status))
    assert hand_written == HAND_WRITTEN
    components = set(DOC["components"]["schemas"])
    expected = {m.__name__ for m in views.RESPONSE_MODELS} | {m.name for m in _REQUEST_MODELS}
    expected |= {"Error", "JoinRequest", "StoredWorkloadSpec", "StoredFunctionSpec"}
    assert components == expected


# Module level: type_schema resolves annotations (strings here) in the module's globals.
@dataclasses.dataclass
class Inner:
    x: int


@dataclasses.dataclass
class Outer:
    kind: Literal["a", "b"]
    inner: Inner
    stored: Annotated[dict[str, Any], StoredAs(Inner), {"description": "as stored"}]
    maybe: Inner | None
    note: str = ""


class Keys(TypedDict):
    a: int
    b: NotRequired[str]


def test_type_schema_states_literals_stored_dicts_references_and_required_fields():
    ref = {"$ref": "#/components/schemas/In"}
    assert type_schema(Outer, {Inner: "In"}) == {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["a", "b"]},
            "inner": ref,
            "stored": {**ref, "description": "as stored"},
            "maybe": {"anyOf": [ref, {"type": "null"}]},
            "note": {"type": "string"},
        },
        "required": ["kind", "inner", "stored", "maybe"],
    }
    # The top-level type is expanded even when it has a component; without components, inline.
    assert type_schema(Inner, {Inner: "In"})["properties"] == {"x": {"type": "integer"}}
    assert type_schema(Outer)["properties"]["inner"]["required"] == ["x"]
    assert type_schema(Keys)["required"] == ["a"]
    assert type_schema(Literal[1, "x"]) == {"enum": [1, "x"]}
