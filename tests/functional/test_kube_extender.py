"""The Kubernetes scheduler extender on a real hub with real agents: kube-scheduler's payloads
(recorded shapes in tests/fixtures/kube_extender) over real HTTP, answers checked key by key."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import running_agents, running_hub, wait_for, write_power_supply

from controlplane.extender.settings import ExtenderSettings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube_extender"
GiB = 2**30


def _payload(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return body


async def _post(url: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, await response.json()


@pytest.fixture
async def fleet(nats_server, sqlite_url, tmp_path) -> AsyncIterator[tuple[str, Any]]:
    """A hub serving the extender on loopback; agents edge-mains, edge-battery (30%), edge-small
    (1 core) and edge-busy (2 of its 4 cores taken by an edgeplane workload)."""
    async with (
        running_hub(nats_server.url, sqlite_url, extender=ExtenderSettings("127.0.0.1", 0)) as (running, api),
        running_agents(nats_server.url, tmp_path, ["edge-mains", "edge-battery", "edge-busy"]) as agents,
        running_agents(nats_server.url, tmp_path, ["edge-small"], cpu=1.0, memory=2 * GiB),
    ):
        write_power_supply(agents[1].power_dir, on_battery=True, percent=30)
        await wait_for(lambda: api.get("/v1/nodes/edge-battery"), lambda n: n["power"]["source"] == "battery")
        busy = await api.post_workload(
            {
                "name": "busy",
                "command": ["sleep", "60"],
                "resources": {"cpu": 2},
                "affinity": {"nodes": ["edge-busy"]},
            }
        )
        await api.wait_status(busy, "Running")
        assert running.extender is not None
        yield running.extender.url, api


async def test_filter_with_node_names_keeps_what_fits_and_says_why_the_rest_does_not(fleet) -> None:
    url, _ = fleet
    status, body = await _post(f"{url}/filter", _payload("filter_node_names.json"))
    assert status == 200
    assert body["Nodes"] is None
    # The pod asks 2.5 cores (its init container) and 1Gi.
    assert body["NodeNames"] == ["edge-mains", "edge-battery"]
    assert body["FailedNodes"] == {"edge-busy": "Insufficient cpu"}
    unresolvable = body["FailedAndUnresolvableNodes"]
    assert set(unresolvable) == {"edge-small", "kind-control-plane"}
    assert unresolvable["edge-small"] == "Insufficient cpu"  # as kube says it; unresolvable
    assert unresolvable["kind-control-plane"].startswith("edgeplane knows no node 'kind-control-plane'")
    assert body["Error"] == ""


async def test_filter_with_a_node_list_maps_nodes_by_label_and_echoes_the_objects(fleet) -> None:
    url, _ = fleet
    payload = _payload("filter_node_list.json")
    status, body = await _post(f"{url}/filter", payload)
    assert status == 200
    assert body["NodeNames"] is None
    given = {n["metadata"]["name"]: n for n in payload["Nodes"]["items"]}
    assert body["Nodes"] == {"metadata": {}, "items": [given["k8s-worker-1"], given["k8s-worker-2"]]}
    assert body["FailedNodes"] == {}
    assert (
        body["FailedAndUnresolvableNodes"]["edge-small"] == "Insufficient cpu"
    )  # as kube says it; unresolvable
    assert "no node 'k8s-worker-9'" in body["FailedAndUnresolvableNodes"]["k8s-worker-9"]
    assert body["Error"] == ""


async def test_prioritize_scores_the_battery_node_below_the_mains_node(fleet) -> None:
    url, api = fleet
    payload = _payload("filter_node_names.json")
    payload["NodeNames"] = ["edge-battery", "edge-mains", "edge-busy"]
    status, body = await _post(f"{url}/prioritize", payload)
    assert status == 200
    scores = {entry["Host"]: entry["Score"] for entry in body}
    assert [entry["Host"] for entry in body] == payload["NodeNames"]
    assert scores["edge-mains"] == 10 and 0 <= scores["edge-battery"] < scores["edge-mains"]
    assert scores["edge-busy"] == 0  # does not fit
    # Nothing was reserved: the hub's own accounting is as before.
    assert (await api.get("/v1/nodes/edge-mains"))["allocated"]["cpu"] == 0


async def test_a_malformed_body_is_a_400_naming_the_field(fleet) -> None:
    url, _ = fleet
    payload = _payload("filter_node_names.json")
    payload["Pod"]["spec"]["containers"][1]["resources"]["requests"]["memory"] = "a lot"
    for verb in ("filter", "prioritize"):
        status, body = await _post(f"{url}/{verb}", payload)
        assert (status, body["field"]) == (400, "Pod.spec.containers[1].resources.requests.memory")


@pytest.mark.parametrize("command", ["serve", "up"])
def test_a_non_loopback_extender_without_client_tls_fails_at_start_with_one_line(command, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", command, "--data-dir", str(tmp_path), "--port", "0",
         "--extender-listen", "0.0.0.0:8888"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--extender-listen: 0.0.0.0 is not a loopback address" in lines[0]
    assert "--extender-client-ca" in lines[0]
