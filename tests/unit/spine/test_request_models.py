"""The OpenAPI document states what the parsers enforce: at every bound and enum of every request
model and query parameter, the parser and JSON Schema validation against the served document
agree (just outside: both refuse; at the boundary: both accept)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from controlplane.api import params
from controlplane.api.openapi import openapi_document
from controlplane.errors import InvocationFailedError, ValidationError, error_body
from controlplane.policies.decision_logs import DECISION_LOG_REQUEST
from controlplane.policies.profile_canary import PROFILE_CANARY
from controlplane.policies.upload import CANARY, POLICY_ROLLBACK, POLICY_ROLLOUT, POLICY_UPLOAD
from controlplane.schema import Choice, Integer, Model, Number, Text
from controlplane.serverless.spec import FUNCTION
from controlplane.specs.workload import AFFINITY, AFFINITY_WITHOUT_LABELS, ANTI_AFFINITY, RESOURCES, WORKLOAD

jsonschema_rs = pytest.importorskip("jsonschema_rs")

DOC = openapi_document()
BASES: dict[str, dict[str, Any]] = {
    "WorkloadSpec": {"name": "ok", "command": ["true"]},
    # With a command too: valid for either runtime (each ignores the other's keys).
    "FunctionSpec": {
        "name": "echo",
        "source": "def handle(e, c):\n    return e\n",
        "handler": "handle",
        "command": ["x"],
    },
    "Resources": {},
    "Affinity": {},
    "AffinityWithoutLabels": {},
    "AntiAffinity": {},
    "PolicyUpload": {"model": "AAAA", "metadata": {}},
    "PolicyRollout": {"percent": 10},
    "PolicyRollback": {},
    "CanaryRequest": {},
    "DecisionLogRequest": {},
    "ProfileCanaryRequest": {"profile": "default"},
}


def _models() -> list[Model[Any]]:
    return [
        WORKLOAD,
        FUNCTION,
        RESOURCES,
        AFFINITY,
        AFFINITY_WITHOUT_LABELS,
        ANTI_AFFINITY,
        POLICY_UPLOAD,
        POLICY_ROLLOUT,
        POLICY_ROLLBACK,
        CANARY,
        DECISION_LOG_REQUEST,
        PROFILE_CANARY,
    ]


def _document_accepts(component: str, body: Any) -> bool:
    schema = {"$ref": f"#/components/schemas/{component}", "components": DOC["components"]}
    return bool(jsonschema_rs.validator_for(schema).is_valid(body))


def _parser_accepts(model: Model[Any], body: Any) -> bool:
    try:
        model.parse(body, "" if model.name in ("WorkloadSpec", "FunctionSpec") else "nested")
    except ValidationError:
        return False
    return True


def _edge_values(kind: Any) -> list[tuple[Any, bool]]:
    """(value, whether the field's rules accept it) at and just beyond each bound and enum."""
    if isinstance(kind, Integer):
        return [
            (kind.low, True),
            (kind.high, True),
            (kind.low - 1, False),
            (kind.high + 1, False),
            ("1", False),
        ]
    if isinstance(kind, Number):
        out: list[tuple[Any, bool]] = [("1", False), (True, False)]
        if kind.low is not None:
            out += [(kind.low, not kind.exclusive_low), (kind.low - 1e-4, False)]
            out.append((kind.low + 1e-4, True))
        if kind.high is not None:
            out += [(kind.high, True), (kind.high + 1e-3, False)]
        return out
    if isinstance(kind, Choice):
        return [*((option, True) for option in kind.options), ("surely-not-an-option", False), (1, False)]
    if isinstance(kind, Text) and kind.pattern is not None:
        return [("Not Valid!", False), ("", False), (7, False)]
    return []


def _cases() -> list[tuple[str, str, Any, bool]]:
    cases = []
    for model in _models():
        for field in model.fields:
            for value, accepted in _edge_values(field.kind):
                cases.append((model.name, field.name, value, accepted))
    return cases


@pytest.mark.parametrize(("component", "field", "value", "accepted"), _cases())
def test_each_bound_and_enum_is_enforced_by_the_parser_and_the_document_alike(
    component, field, value, accepted
):
    model = next(m for m in _models() if m.name == component)
    body = {**BASES[component], field: value}
    assert _parser_accepts(model, body) is accepted, (component, field, value)
    assert _document_accepts(component, body) is accepted, (component, field, value)


# The hand-written schemas of parsers the models wrap (quantities, argv, env, MIG, source).
CUSTOM_CASES = [
    ("Resources", {"cpu": "500m"}, True),
    ("Resources", {"cpu": 1e6}, True),
    ("Resources", {"cpu": 1e6 + 1}, False),
    ("Resources", {"cpu": 0}, False),
    ("Resources", {"cpu": "lots"}, False),
    ("Resources", {"memory": 1}, True),
    ("Resources", {"memory": 0}, False),
    ("Resources", {"memory": 2**60}, True),
    ("Resources", {"memory": 2**60 + 1}, False),
    ("Resources", {"memory": "64Mi"}, True),
    ("Resources", {"memory": "64Mb"}, False),
    ("Resources", {"mig": "1g.5gb"}, True),
    ("Resources", {"mig": ["1g.5gb", "7g.40gb"]}, True),
    ("Resources", {"mig": "9g.90gb"}, False),
    ("Resources", {"disk": 1}, False),
    ("Affinity", {"node_labels": {"zone": "a"}}, True),
    ("AffinityWithoutLabels", {"node_labels": {}}, False),
    ("Affinity", {"preferred_labels": {"zone": "a"}}, True),
    ("AntiAffinity", {"spread_replicas": True, "nodes": ["n1"]}, True),
    ("AntiAffinity", {"node_labels": {"zone": "a"}}, False),
    ("Affinity", {"clusters": [""]}, False),
    ("WorkloadSpec", {"command": []}, False),
    ("WorkloadSpec", {"command": ["", "x"]}, False),
    ("WorkloadSpec", {"command": ["x", ""]}, True),
    ("WorkloadSpec", {"env": {"A": "1"}}, True),
    ("WorkloadSpec", {"env": {"A=B": "1"}}, False),
    ("WorkloadSpec", {"env": {"A": 1}}, False),
    ("WorkloadSpec", {"resources": None, "affinity": None, "timeout_s": None}, True),
    ("WorkloadSpec", {"surprise": 1}, False),
    ("FunctionSpec", {"memory": 16 * 2**20}, True),
    ("FunctionSpec", {"memory": 16 * 2**20 - 1}, False),
    ("FunctionSpec", {"memory": "16Mi"}, True),
    ("FunctionSpec", {"mig": None, "version": None, "sla_latency_ms": None}, True),
    ("FunctionSpec", {"source": ""}, False),
    ("FunctionSpec", {"handler": "not valid"}, False),
    ("FunctionSpec", {"runtime": "command", "source": None, "handler": None}, True),
    ("FunctionSpec", {"runtime": "command", "command": None}, False),
    ("FunctionSpec", {"handler": None}, False),
    ("FunctionSpec", {"runtime": "command", "command": [""]}, False),
    ("PolicyUpload", {"model": ""}, False),
    ("PolicyUpload", {"model": 5}, False),
    ("PolicyUpload", {"metadata": []}, False),
    ("PolicyUpload", {"description": "x" * 200}, True),
    ("PolicyUpload", {"description": "x" * 201}, False),
    ("PolicyUpload", {"min_agreement": None}, False),
    ("PolicyRollout", {"nodes": ["n1"], "percent": None}, True),
    ("PolicyRollout", {"labels": {"tier": "canary"}, "percent": None}, True),
    ("PolicyRollback", {"reason": "x" * 201}, False),
    ("CanaryRequest", {"steps": [10, 50, 100]}, True),
    ("CanaryRequest", {"steps": []}, False),
    ("CanaryRequest", {"steps": [0, 100]}, False),
]


@pytest.mark.parametrize(("component", "change", "accepted"), CUSTOM_CASES)
def test_hand_written_parts_agree_with_their_parsers(component, change, accepted):
    model = next(m for m in _models() if m.name == component)
    body = {**BASES[component], **change}
    assert _parser_accepts(model, body) is accepted, (component, change)
    assert _document_accepts(component, body) is accepted, (component, change)


def _int_params() -> list[params.IntQuery]:
    return [p for p in vars(params).values() if isinstance(p, params.IntQuery)]


@pytest.mark.parametrize("param", _int_params(), ids=lambda p: p.name)
def test_integer_query_parameters_are_documented_with_the_bounds_they_enforce(param):
    documented = next(
        p
        for path in DOC["paths"].values()
        for operation in path.values()
        for p in operation.get("parameters", [])
        if p == param.parameter()
    )
    validator = jsonschema_rs.validator_for(documented["schema"])
    for value, accepted in (
        (param.low, True),
        (param.high, True),
        (param.low - 1, False),
        (param.high + 1, False),
    ):
        request = make_mocked_request("GET", f"/x?{param.name}={value}")
        try:
            parsed = param.parse(request)
        except ValidationError as exc:
            assert not accepted and exc.field == param.name, value
        else:
            assert accepted and parsed == value, value
        assert validator.is_valid(value) is accepted, value
    assert param.parse(make_mocked_request("GET", "/x")) == documented["schema"].get("default")


def test_a_failed_invocation_renders_as_the_functions_routes_always_answered():
    error = InvocationFailedError(
        {"code": "function_error", "message": "boom", "type": "ValueError", "traceback": "T"},
        invocation_id="abc",
        headers={"X-Edgeplane-Node": "n1"},
    )
    assert error.http_status == 502 and error.headers["X-Edgeplane-Node"] == "n1"
    assert json.dumps(error_body(error)) == json.dumps(
        {
            "error": {
                "code": "function_error",
                "message": "boom",
                "field": None,
                "type": "ValueError",
                "traceback": "T",
            },
            "invocation_id": "abc",
        }
    )
    statuses = {
        code: InvocationFailedError({"code": code}, invocation_id="i", headers={}).http_status
        for code in (
            "no_capacity",
            "capacity",
            "unavailable",
            "timeout",
            "too_large",
            "bad_result",
            "agent_lost",
        )
    }
    assert statuses == {
        "no_capacity": 503,
        "capacity": 503,
        "unavailable": 503,
        "timeout": 504,
        "too_large": 413,
        "bad_result": 502,
        "agent_lost": 502,
    }
    bare = error_body(InvocationFailedError({}, invocation_id="i", headers={}))
    assert bare == {"error": {"code": "function_error", "message": "", "field": None}, "invocation_id": "i"}


def test_every_json_request_body_is_a_generated_model_but_the_join_body():
    bodies = {
        (method, path): operation["requestBody"]["content"]["application/json"]["schema"].get("$ref", "")
        for path, operations in DOC["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    }
    generated = {f"#/components/schemas/{m.name}" for m in _models()}
    hand_written = {("post", "/v1/join"), ("post", "/v1/functions/{name}/invoke")}  # the join body; any event
    assert {key for key, ref in bodies.items() if ref not in generated} == hand_written
    for model in _models():
        assert DOC["components"]["schemas"][model.name] == model.schema()
