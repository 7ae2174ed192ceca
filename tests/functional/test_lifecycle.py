"""Registration, heartbeats and the workload lifecycle through a real hub, NATS and agents."""

from __future__ import annotations

import asyncio

import pytest
from harness import CONFINED_PY, running_agents, running_hub, wait_for


async def test_agents_register_and_their_heartbeats_reach_the_node_record(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"]),
    ):
        nodes = await wait_for(api.nodes, lambda items: len(items) == 2)
        assert sorted(n["name"] for n in nodes) == ["n1", "n2"]
        assert all(n["status"] == "Ready" for n in nodes)
        assert nodes[0]["resources"]["cpu"] == 4.0
        assert nodes[0]["resources"]["memory"] == 8 * 2**30
        assert nodes[0]["power"]["source"] == "mains"
        first = (await api.get("/v1/nodes/n1"))["last_heartbeat_at"]
        later = await wait_for(lambda: api.get("/v1/nodes/n1"), lambda n: n["last_heartbeat_at"] != first)
        assert later["telemetry"]["memory_total_bytes"] > 0
        clusters = (await api.get("/v1/clusters"))["items"]
        assert clusters == [
            {"name": "default", "region": "local", "status": "Available", "nodes": 2, "ready_nodes": 2}
        ]


async def test_a_workload_moves_from_pending_to_succeeded_with_node_exit_code_and_times(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]),
    ):
        workload_id = await api.post_workload(
            {"name": "hello", "command": ["sh", "-c", "echo hi"], "resources": {"cpu": 0.5, "memory": "64Mi"}}
        )
        done = await api.wait_status(workload_id, "Succeeded", "Failed")
        assert done["status"] == "Succeeded"
        assert done["node"] == "n1"
        assert done["exit_code"] == 0
        assert done["created_at"] <= done["scheduled_at"] <= done["started_at"] <= done["finished_at"]
        kinds = [e["kind"] for e in (await api.get(f"/v1/events?object_id={workload_id}"))["items"]]
        for kind in ("WorkloadCreated", "PlacementScheduled", "WorkloadScheduled", "WorkloadSucceeded"):
            assert kind in kinds
        assert kinds.index("WorkloadScheduled") < kinds.index("WorkloadSucceeded")
        log = (tmp_path / "agents" / "n1" / "logs" / f"{done['placements'][0]['id']}.log").read_text()
        assert log.strip() == "hi"


async def test_a_failing_command_ends_failed_with_its_exit_code_and_last_output_line(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]),
    ):
        failing = await api.post_workload({"name": "fails", "command": ["sh", "-c", "echo boom >&2; exit 3"]})
        missing = await api.post_workload({"name": "missing", "command": ["/no/such/binary"]})
        done = await api.wait_status(failing, "Succeeded", "Failed")
        assert (done["status"], done["exit_code"]) == ("Failed", 3)
        assert "boom" in done["message"]
        not_found = await api.wait_status(missing, "Succeeded", "Failed")
        assert (not_found["status"], not_found["exit_code"]) == ("Failed", 127)
        assert "could not start" in not_found["message"]


async def test_the_process_is_limited_in_memory_and_killed_at_its_timeout(nats_server, sqlite_url, tmp_path):
    if CONFINED_PY is None:
        pytest.skip("no Python interpreter here that a confined workload may run")
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]),
    ):
        hog = await api.post_workload(
            {
                "name": "hog",
                "command": [CONFINED_PY, "-c", "x = bytearray(400 * 2**20)"],
                "resources": {"memory": "200Mi"},
            }
        )
        slow = await api.post_workload({"name": "slow", "command": ["sleep", "30"], "timeout_s": 0.5})
        hogged = await api.wait_status(hog, "Succeeded", "Failed")
        assert hogged["status"] == "Failed" and "MemoryError" in hogged["message"]
        timed_out = await api.wait_status(slow, "Succeeded", "Failed")
        assert timed_out["status"] == "Failed" and "timed out" in timed_out["message"]


async def test_delete_stops_a_running_workload_and_is_idempotent(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        workload_id = await api.post_workload({"name": "sleeper", "command": ["sleep", "60"]})
        running = await api.wait_status(workload_id, "Running")
        placement_id = running["placements"][0]["id"]
        process = agents[0].agent.runner.placements[placement_id].process
        assert process is not None and process.returncode is None
        status, body = await api.call("DELETE", f"/v1/workloads/{workload_id}")
        assert status == 202 and body["status"] in ("Cancelling", "Cancelled")
        done = await api.wait_status(workload_id, "Cancelled")
        assert done["placements"][0]["status"] == "Cancelled"
        assert process.returncode is not None
        again, body = await api.call("DELETE", f"/v1/workloads/{workload_id}")
        assert (again, body["status"]) == (202, "Cancelled")
        status, body = await api.call("DELETE", "/v1/workloads/does-not-exist")
        assert status == 404 and body["error"]["field"] == "id"


async def test_a_workload_that_fits_nowhere_waits_and_runs_when_capacity_appears(
    nats_server, sqlite_url, tmp_path
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        workload_id = await api.post_workload(
            {"name": "big", "command": ["true"], "resources": {"cpu": 6, "memory": "1Gi"}}
        )
        waiting = await wait_for(lambda: api.workload(workload_id), lambda w: bool(w["message"]))
        assert waiting["status"] == "Pending"
        async with running_agents(nats_server.url, tmp_path, ["small"], cpu=4.0):
            await asyncio.sleep(0.5)
            assert (await api.workload(workload_id))["status"] == "Pending"
            async with running_agents(nats_server.url, tmp_path, ["large"], cpu=8.0):
                done = await api.wait_status(workload_id, "Succeeded")
                assert done["node"] == "large"


async def test_replicas_spread_and_all_must_succeed(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"], cpu=1.0),
    ):
        workload_id = await api.post_workload(
            {"name": "pair", "command": ["sleep", "0.3"], "replicas": 2, "resources": {"cpu": 1}}
        )
        done = await api.wait_status(workload_id, "Succeeded", "Failed")
        assert done["status"] == "Succeeded"
        assert sorted(done["nodes"]) == ["n1", "n2"]


async def test_affinity_from_the_api_reaches_the_scheduler_as_it_is(nats_server, sqlite_url, tmp_path):
    """One affinity model from the API to the scheduler: preferred labels steer, spread_replicas
    keeps replicas apart though each node has room for both (a packing profile would put them
    together), and the stored spec shows them."""
    async with (
        running_hub(nats_server.url, sqlite_url, scheduler="binpack", bid_deadline_ms=0) as (_, api),
        running_agents(nats_server.url, tmp_path, ["s1", "s2", "s3"], cpu=4.0, labels={"tier": "edge"}),
    ):
        spread = await api.post_workload(
            {
                "name": "spread",
                "command": ["sleep", "0.3"],
                "replicas": 2,
                "resources": {"cpu": "100m"},
                "affinity": {"preferred_labels": {"tier": "edge"}},
                "anti_affinity": {"spread_replicas": True, "nodes": ["s3"]},
            }
        )
        done = await api.wait_status(spread, "Succeeded", "Failed")
        assert done["status"] == "Succeeded"
        assert sorted(done["nodes"]) == ["s1", "s2"]
        assert done["spec"]["affinity"]["preferred_labels"] == {"tier": "edge"}
        assert done["spec"]["anti_affinity"] == {
            "clusters": [],
            "nodes": ["s3"],
            "regions": [],
            "spread_replicas": True,
        }


async def test_an_idempotency_key_makes_a_retried_post_return_the_same_workload(
    nats_server, sqlite_url, tmp_path
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        body = {"name": "once", "command": ["true"]}
        first = await api.call("POST", "/v1/workloads", body, headers={"Idempotency-Key": "k-1"})
        second = await api.call("POST", "/v1/workloads", body, headers={"Idempotency-Key": "k-1"})
        assert first[0] == 201 and second[0] == 200
        assert first[1]["id"] == second[1]["id"]
        assert (await api.get("/v1/workloads?name=once"))["total"] == 1


async def test_lists_paginate_and_filter(nats_server, sqlite_url, tmp_path):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        for index in range(5):
            await api.post_workload({"name": f"w{index}", "command": ["true"]})
        page = await api.get("/v1/workloads?limit=2&offset=1")
        # Newest first: new work is on the first page.
        assert page["total"] == 5 and [w["name"] for w in page["items"]] == ["w3", "w2"]
        assert (await api.get("/v1/workloads?status=Pending"))["total"] == 5
        assert (await api.get("/v1/workloads?status=Running"))["total"] == 0
        status, body = await api.call("GET", "/v1/workloads?limit=0")
        assert status == 422 and body["error"]["field"] == "limit"
        status, body = await api.call("GET", "/v1/workloads?status=Bogus")
        assert status == 422 and body["error"]["field"] == "status"
        events = await api.get("/v1/events?limit=2")
        more = await api.get(f"/v1/events?after={events['next_after']}&limit=2")
        assert events["items"][-1]["id"] < more["items"][0]["id"]


@pytest.mark.parametrize("path", ["/v1/nodes/ghost", "/v1/workloads/ghost", "/v1/workloads/ghost/placement"])
async def test_unknown_ids_get_404_with_a_json_error(nats_server, sqlite_url, path):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, body = await api.call("GET", path)
        assert status == 404
        assert body["error"]["code"] == "not_found"
