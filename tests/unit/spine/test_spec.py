"""Workload specs and resource quantities."""

from __future__ import annotations

import pytest

from edgeplane_contract.resources import format_memory, parse_cpu, parse_memory

from controlplane.errors import ValidationError
from controlplane.specs.workload import WorkloadSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64Mi", 64 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("512", 512), (2048, 2048), ("1.5Ki", 1536)],
)
def test_memory_quantities_parse_to_bytes(text, expected):
    assert parse_memory(text) == expected


@pytest.mark.parametrize("bad", ["64MB", "-1", "", "lots", True, None, 0, [1]])
def test_bad_memory_quantities_name_the_field(bad):
    with pytest.raises(ValidationError) as info:
        parse_memory(bad, field_name="resources.memory")
    assert info.value.field == "resources.memory"


@pytest.mark.parametrize(("text", "expected"), [("500m", 0.5), (2, 2.0), ("1.5", 1.5), (0.25, 0.25)])
def test_cpu_quantities_parse_to_cores(text, expected):
    assert parse_cpu(text) == expected


def test_memory_formats_with_the_largest_exact_suffix():
    assert format_memory(64 * 2**20) == "64Mi"
    assert format_memory(1000) == "1000"


def test_a_full_spec_round_trips_through_its_stored_form():
    spec = WorkloadSpec.parse(
        {
            "name": "train-1",
            "command": ["python", "train.py"],
            "env": {"EPOCHS": "3"},
            "resources": {"cpu": "1500m", "memory": "2Gi", "mig": ["1g.5gb", "2g.10gb"]},
            "replicas": 3,
            "priority": 10,
            "affinity": {"clusters": ["edge-eu"], "node_labels": {"zone": "a"}},
            "anti_affinity": {"nodes": ["n9"]},
            "gang": True,
            "kind": "batch",
            "sla_latency_s": 30,
            "timeout_s": 600,
        }
    )
    assert spec.resources.cpu == 1.5 and spec.resources.mig == ["1g.5gb", "2g.10gb"]
    assert WorkloadSpec.from_stored(spec.to_dict()) == spec


def test_the_simplest_spec_gets_defaults():
    spec = WorkloadSpec.parse({"name": "hello", "command": ["true"]})
    assert (spec.replicas, spec.priority, spec.kind, spec.gang) == (1, 0, "batch", False)
    assert spec.resources.cpu == 0.1 and spec.resources.memory == 64 * 2**20


def test_restart_policy_and_max_restarts_default_parse_and_round_trip():
    plain = WorkloadSpec.parse({"name": "x", "command": ["true"]})
    assert (plain.restart_policy, plain.max_restarts) == ("never", 5)
    spec = WorkloadSpec.parse(
        {
            "name": "svc",
            "command": ["serve"],
            "restart_policy": "always",
            "max_restarts": 0,
            "kind": "inference",
        }
    )
    assert (spec.restart_policy, spec.max_restarts) == ("always", 0)
    assert WorkloadSpec.from_stored(spec.to_dict()) == spec
    assert spec.offer().kind == "service"  # the local policy has no inference kind
    stored_before_restarts = {
        k: v for k, v in plain.to_dict().items() if k not in ("restart_policy", "max_restarts")
    }
    assert WorkloadSpec.from_stored(stored_before_restarts) == plain


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"restart_policy": "sometimes"}, "restart_policy"),
        ({"restart_policy": "OnFailure"}, "restart_policy"),
        ({"restart_policy": None}, "restart_policy"),
        ({"restart_policy": ["always"]}, "restart_policy"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 2.5}, "max_restarts"),
        ({"max_restarts": True}, "max_restarts"),
        ({"max_restarts": "5"}, "max_restarts"),
        ({"max_restarts": 10_001}, "max_restarts"),
    ],
)
def test_bad_restart_settings_name_their_field(body, field):
    with pytest.raises(ValidationError) as info:
        WorkloadSpec.parse({"name": "x", "command": ["true"], **body})
    assert info.value.field == field


def test_one_workload_model_from_the_api_to_the_scheduler() -> None:
    """The spec's placement terms are the scheduler's own: the request carries the same objects,
    stored specs keep every field (in the order users write them) and read back equal."""
    from dataclasses import fields

    from controlplane.scheduling.model import PLACEMENT_TERMS
    from controlplane.specs.workload import _STORED_ORDER

    spec = WorkloadSpec.parse(
        {
            "name": "infer",
            "command": ["serve"],
            "resources": {"cpu": "500m", "memory": "1Gi"},
            "replicas": 3,
            "priority": 7,
            "affinity": {"clusters": ["edge"], "preferred_labels": {"zone": "a"}},
            "anti_affinity": {"spread_replicas": True},
            "gang": True,
            "kind": "inference",
            "sla_latency_s": 0.2,
            "timeout_s": 30,
        }
    )
    request = spec.request("w1")
    for term in PLACEMENT_TERMS:
        assert getattr(request, term) == getattr(spec, term), term
    assert request.affinity is spec.affinity and request.resources is spec.resources
    assert (request.id, request.name, request.kind) == ("w1", "infer", "service")
    assert request.expected_runtime_s == 30
    assert set(_STORED_ORDER) == {f.name for f in fields(WorkloadSpec)}
    assert list(spec.to_dict())[:3] == ["name", "command", "env"]
    assert WorkloadSpec.from_stored(spec.to_dict()) == spec
