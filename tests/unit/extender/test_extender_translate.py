"""A Pod's requests as a WorkloadRequest: kube's quantities and its pod-request rule."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from controlplane.errors import ValidationError
from controlplane.extender.kube import KubeNode
from controlplane.extender.quantity import parse_quantity
from controlplane.extender.translate import NODE_LABEL, UnsupportedPod, edgeplane_node, pod_request

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kube_extender"
Mi, Gi = 2**20, 2**30


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("0.25", Decimal("0.25")),
        (".5", Decimal("0.5")),
        ("128Mi", Decimal(128 * Mi)),
        ("1G", Decimal(10**9)),
        ("1Ki", Decimal(1024)),
        ("2Pi", Decimal(2 * 2**50)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1E", Decimal(10**18)),
        ("1.5e-3", Decimal("0.0015")),
        ("250u", Decimal("0.00025")),
        ("0", Decimal(0)),
        ("+1", Decimal(1)),
        (3, Decimal(3)),
        (0.5, Decimal("0.5")),
    ],
)
def test_quantities_read_as_kube_reads_them(text: object, value: Decimal) -> None:
    assert parse_quantity(text, field="q") == value


@pytest.mark.parametrize("text", ["", "-1", "1.2.3", "12Mb", "1 Gi x", "e3", "lots", True, None, [1]])
def test_a_bad_quantity_names_its_field(text: object) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_quantity(text, field="Pod.spec.containers[0].resources.requests.cpu")
    assert caught.value.field == "Pod.spec.containers[0].resources.requests.cpu"


def _pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": list(containers), **spec}}


def _c(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": "c", "image": "i", "resources": resources, **kw}


def test_the_recorded_pod_sums_its_containers_and_keeps_its_largest_init_container() -> None:
    pod = json.loads((FIXTURES / "filter_node_names.json").read_text())["Pod"]
    request = pod_request(pod)
    # containers 1500m + 0.5 = 2 cores; the init container's 2500m is larger; memory 768Mi + 256Mi.
    assert request.resources.cpu == 2.5
    assert request.resources.memory == Gi
    assert (request.resources.gpu, request.resources.mig) == (0, [])
    assert request.priority == 1000
    assert request.id == "k8s:edge/inference-7d9f8b6c4-x2k8p"


def test_sidecars_add_to_the_containers_and_to_the_init_containers_after_them() -> None:
    sidecar = _c({"cpu": "1", "memory": "100Mi"}, restartPolicy="Always")
    init = _c({"cpu": "3", "memory": "50Mi"})
    request = pod_request(_pod(_c({"cpu": "1", "memory": "1Gi"}), initContainers=[sidecar, init]))
    # containers + sidecar = 2 cores, 1Gi + 100Mi; init after the sidecar: 4 cores, 150Mi.
    assert request.resources.cpu == 4.0
    assert request.resources.memory == Gi + 100 * Mi


def test_overhead_is_added_and_a_missing_request_is_its_limit() -> None:
    request = pod_request(_pod(_c(limits={"cpu": "1", "memory": "64Mi"}), overhead={"cpu": "250m"}))
    assert (request.resources.cpu, request.resources.memory) == (1.25, 64 * Mi)


def test_a_pod_without_requests_asks_for_kubes_scoring_defaults() -> None:
    request = pod_request(_pod({"name": "c", "image": "i"}))
    assert (request.resources.cpu, request.resources.memory) == (0.1, 200 * Mi)


def test_gpus_and_mig_slices_map_to_the_resource_model() -> None:
    gpus = pod_request(_pod(_c({"cpu": "1", "nvidia.com/gpu": "2"})))
    assert gpus.resources.gpu == 2
    mig = pod_request(_pod(_c({"nvidia.com/mig-1g.5gb": "2"}), _c({"nvidia.com/mig-3g.20gb": 1})))
    assert sorted(mig.resources.mig) == ["1g.5gb", "1g.5gb", "3g.20gb"]


def test_resources_kube_keeps_for_itself_are_not_read() -> None:
    request = pod_request(_pod(_c({"cpu": "1", "ephemeral-storage": "whatever", "example.com/foo": "3"})))
    assert request.resources.cpu == 1.0


@pytest.mark.parametrize(
    ("requests", "words"),
    [
        ({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "1"}, "nvidia.com/gpu and MIG slices"),
        ({"nvidia.com/mig-1g.10gb": "1"}, "not an A100-40GB MIG profile"),
        ({"nvidia.com/gpu": "500m"}, "whole number"),
        ({"nvidia.com/gpu": "65"}, "at most 64"),
        ({"cpu": "1e9"}, "beyond any node"),
    ],
)
def test_a_pod_edgeplane_cannot_place_says_why(requests: dict[str, str], words: str) -> None:
    with pytest.raises(UnsupportedPod, match=words):
        pod_request(_pod(_c(requests)))


@pytest.mark.parametrize(
    ("pod", "field"),
    [
        ({"metadata": {}}, "Pod.spec"),
        ({"spec": {"containers": {}}}, "Pod.spec.containers"),
        ({"spec": {"containers": ["x"]}}, "Pod.spec.containers[0]"),
        ({"spec": {"containers": [{"resources": []}]}}, "Pod.spec.containers[0].resources"),
        ({"spec": {"containers": [_c({"cpu": "x"})]}}, "Pod.spec.containers[0].resources.requests.cpu"),
        (
            {"spec": {"containers": [_c(limits={"memory": "1Q"})]}},
            "Pod.spec.containers[0].resources.limits.memory",
        ),
        (
            {"spec": {"containers": [], "initContainers": [_c({"cpu": []})]}},
            "Pod.spec.initContainers[0].resources.requests.cpu",
        ),
        ({"spec": {"containers": [], "priority": "high"}}, "Pod.spec.priority"),
        ({"spec": {"containers": [], "overhead": {"cpu": "-1"}}}, "Pod.spec.overhead.cpu"),
    ],
)
def test_a_malformed_pod_names_the_field(pod: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        pod_request(pod)
    assert caught.value.field == field


def test_a_node_maps_by_its_label_else_by_its_name() -> None:
    assert edgeplane_node(KubeNode("k8s-worker-1", {NODE_LABEL: "edge-1"})) == "edge-1"
    assert edgeplane_node(KubeNode("edge-2", {"kubernetes.io/hostname": "edge-2"})) == "edge-2"
    assert edgeplane_node(KubeNode("w", {"my/label": "edge-3"}), "my/label") == "edge-3"
