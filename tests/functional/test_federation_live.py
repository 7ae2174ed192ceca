"""The hub serves every cluster of a federation file, each on its own subjects."""

from __future__ import annotations

from pathlib import Path

from harness import running_agents, running_hub, wait_for

from controlplane.federation.config import load_federation, parse_federation

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "federation.yaml"


async def test_the_example_federation_file_is_served_and_affinity_picks_the_cluster(
    nats_server, sqlite_url, tmp_path
):
    federation = load_federation(DEPLOY)
    async with running_hub(nats_server.url, sqlite_url, federation) as (_, api):
        async with (
            running_agents(nats_server.url, tmp_path, ["eu-1"], cluster="edge-eu"),
            running_agents(nats_server.url, tmp_path, ["us-1"], cluster="core-us"),
        ):
            clusters = {c["name"]: c for c in (await api.get("/v1/clusters"))["items"]}
            assert set(clusters) == {"edge-eu", "core-us", "edge-ap"}
            assert clusters["edge-eu"]["status"] == "Available" and clusters["edge-ap"]["status"] == "Unknown"
            assert (await api.get("/v1/nodes?cluster=core-us"))["items"][0]["region"] == "us-east"
            workload_id = await api.post_workload(
                {"name": "in-us", "command": ["true"], "affinity": {"clusters": ["core-us"]}}
            )
            done = await api.wait_status(workload_id, "Succeeded")
            assert done["node"] == "us-1"
            assert (await api.get("/v1/workloads?cluster=core-us"))["total"] == 1


async def test_a_cluster_with_its_own_subject_prefix_is_reached_on_it(nats_server, sqlite_url, tmp_path):
    federation = parse_federation(
        {
            "clusters": [
                {"name": "plain", "region": "r1"},
                {"name": "tenant", "region": "r2", "subject_prefix": "acme.edgeplane.v1"},
            ]
        }
    )
    async with running_hub(nats_server.url, sqlite_url, federation) as (_, api):
        async with running_agents(
            nats_server.url, tmp_path, ["t-1"], cluster="tenant", subject_prefix="acme.edgeplane.v1"
        ):
            node = await wait_for(lambda: api.get("/v1/nodes"), lambda body: body["total"] == 1)
            assert node["items"][0]["cluster"] == "tenant"
            workload_id = await api.post_workload({"name": "tenant-job", "command": ["true"]})
            assert (await api.wait_status(workload_id, "Succeeded"))["node"] == "t-1"


async def test_an_agent_of_an_unknown_cluster_is_refused_and_keeps_trying(nats_server, sqlite_url, tmp_path):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        async with running_agents(
            nats_server.url, tmp_path, ["lost"], cluster="nowhere", wait_registered=False
        ) as agents:
            await wait_for(lambda: _count(agents[0]), lambda n: n >= 1, timeout=5)
            assert not agents[0].agent.registered.is_set()
            names = [n["name"] for n in (await api.get("/v1/nodes"))["items"]]
            assert "lost" not in names


async def _count(handle) -> int:
    return handle.agent.counters["register_refused"]
