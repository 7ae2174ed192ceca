"""The extender's routes over real HTTP on loopback, with a scheduler of its own (no hub): the
wire format key by key, and 400s that name the field of a malformed ExtenderArgs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from controlplane.extender.app import PATH_PREFIX, RunningExtender, start_extender
from controlplane.extender.settings import ExtenderSettings
from controlplane.scheduling.model import NodeState
from controlplane.scheduling.scheduler import Scheduler

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kube_extender"
GiB = 2**30


@pytest.fixture
async def extender() -> AsyncIterator[tuple[RunningExtender, Scheduler]]:
    scheduler = Scheduler("edgeplane")
    for name, cpu in (("edge-mains", 4), ("edge-battery", 4), ("edge-small", 1)):
        scheduler.upsert_node(NodeState(name=name, cpu=cpu, memory=8 * GiB, node_type="edge"))
    running = await start_extender(ExtenderSettings("127.0.0.1", 0), scheduler)
    try:
        yield running, scheduler
    finally:
        await running.stop()


async def _post(url: str, body: Any, *, raw: bytes | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        data = raw if raw is not None else json.dumps(body).encode()
        async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()


def _payload(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return body


async def test_filter_answers_an_extender_filter_result_with_every_key(extender) -> None:
    running, _ = extender
    assert running.url.endswith(PATH_PREFIX)
    status, body = await _post(f"{running.url}/filter", _payload("filter_node_names.json"))
    assert status == 200
    assert list(body) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert body["Nodes"] is None
    assert body["NodeNames"] == ["edge-mains", "edge-battery"]
    assert body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"]["edge-small"] == "Insufficient cpu"  # as kube says it
    assert "edgeplane knows no node 'edge-busy'" in body["FailedAndUnresolvableNodes"]["edge-busy"]
    assert set(body["FailedAndUnresolvableNodes"]) == {"edge-small", "edge-busy", "kind-control-plane"}
    assert body["Error"] == ""


async def test_prioritize_answers_a_host_priority_list_in_the_given_order(extender) -> None:
    running, _ = extender
    status, body = await _post(f"{running.url}/prioritize", _payload("filter_node_names.json"))
    assert status == 200
    assert [entry["Host"] for entry in body] == _payload("filter_node_names.json")["NodeNames"]
    assert all(list(entry) == ["Host", "Score"] and 0 <= entry["Score"] <= 10 for entry in body)
    # Two alike nodes fit: both score the maximum; the others 0.
    assert [entry["Score"] for entry in body] == [10, 10, 0, 0, 0]


async def test_an_unplaceable_pod_is_the_filters_error_and_scores_zero(extender) -> None:
    running, _ = extender
    payload = _payload("filter_node_names.json")
    payload["Pod"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.10gb"] = "1"
    status, body = await _post(f"{running.url}/filter", payload)
    assert status == 200
    assert body["Error"].startswith("edgeplane: nvidia.com/mig-1g.10gb is not an A100-40GB MIG profile")
    assert (body["NodeNames"], body["FailedNodes"], body["FailedAndUnresolvableNodes"]) == (None, {}, {})
    status, scores = await _post(f"{running.url}/prioritize", payload)
    assert status == 200 and {entry["Score"] for entry in scores} == {0}


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    target = body
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return body


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize(
    ("mangle", "field"),
    [
        (lambda b: [b], "ExtenderArgs"),
        (lambda b: _without(b, "Pod"), "Pod"),
        (lambda b: {**b, "Pod": "p"}, "Pod"),
        (lambda b: {**b, "NodeNames": None}, "NodeNames"),
        (lambda b: {**b, "NodeNames": "edge-mains"}, "NodeNames"),
        (lambda b: {**b, "NodeNames": ["edge-mains", 3]}, "NodeNames[1]"),
        (lambda b: {**b, "Nodes": {"items": []}}, "NodeNames"),
        (
            lambda b: {**b, "NodeNames": None, "Nodes": {"items": [{"metadata": {}}]}},
            "Nodes.items[0].metadata.name",
        ),
        (lambda b: {**b, "NodeNames": None, "Nodes": {"items": {}}}, "Nodes.items"),
        (lambda b: _without(b, "Pod", "spec"), "Pod.spec"),
        (
            lambda b: {
                **b,
                "Pod": {"spec": {"containers": [{"resources": {"requests": {"memory": "lots"}}}]}},
            },
            "Pod.spec.containers[0].resources.requests.memory",
        ),
    ],
)
async def test_a_malformed_extender_args_is_a_400_naming_the_field(extender, verb, mangle, field) -> None:
    running, _ = extender
    status, body = await _post(f"{running.url}/{verb}", mangle(_payload("filter_node_names.json")))
    assert status == 400, body
    assert body["field"] == field and body["error"]


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b"\xff\xfe"])
async def test_a_body_that_is_not_json_is_a_400(extender, raw) -> None:
    running, _ = extender
    status, body = await _post(f"{running.url}/filter", None, raw=raw)
    assert (status, body["field"]) == (400, "body")


async def test_healthz_counts_the_nodes(extender) -> None:
    running, _ = extender
    async with aiohttp.ClientSession() as session, session.get(f"{running.url}/healthz") as response:
        assert (response.status, await response.json()) == (200, {"status": "ok", "nodes": 3})
