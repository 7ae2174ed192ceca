"""``controlplane delete node NAME`` (``DELETE /v1/nodes/{name}?forget=true``): a node that went
away or was revoked is forgotten instead of staying NotReady forever, its work placed again, its
key revoked; a Ready node only with ``--force``. Real hub, real agents, real NATS and SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import (
    SecuredNats,
    client_cli,
    running_agents,
    running_hub,
    secured_nats,
    spawn_agent,
    wait_for,
    write_admin_config,
)
from test_policies import FP32, METADATA
from test_policies import body as policy_body

from edgeplane_contract.credentials import new_user_seed, public_key_of

from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.client.tables import RESOURCES
from controlplane.policies.registry import PolicyRegistry
from controlplane.store.identities import IdentityStore


async def _events(api: Any, kind: str) -> list[dict[str, Any]]:
    return list((await api.get(f"/v1/events?kind={kind}"))["items"])


async def test_a_silent_node_is_deleted_its_work_placed_again_and_a_ready_one_needs_force(
    nats_server, sqlite_url, tmp_path
):
    agents = {name: spawn_agent(nats_server.url, name, tmp_path) for name in ("d1", "d2")}
    try:
        # The default eviction grace (30 s) holds a silent node's work: only the delete frees it.
        async with running_hub(nats_server.url, sqlite_url) as (running, api):
            await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["status"] == "Ready" for x in n))
            workload_id = await api.post_workload(
                {"name": "long", "command": ["sleep", "60"], "resources": {"cpu": 1}}
            )
            first = await api.wait_status(workload_id, "Running")
            gone, stay = first["node"], ({"d1", "d2"} - {first["node"]}).pop()
            placement_id = first["placements"][0]["id"]

            # A Ready node: refused, nothing done.
            status, body = await api.call("DELETE", f"/v1/nodes/{gone}?forget=true")
            assert status == 409 and body["error"]["field"] == "name", body
            assert "is Ready" in body["error"]["message"] and "force" in body["error"]["message"]
            assert (await api.get(f"/v1/nodes/{gone}"))["status"] == "Ready"
            await write_admin_config(running, tmp_path)
            refused = await asyncio.to_thread(client_cli, tmp_path, "delete", "node", gone)
            assert refused.returncode != 0 and "is Ready" in refused.stderr, refused
            # Unknown: 404; a token without the nodes scope: 403.
            status, body = await api.call("DELETE", "/v1/nodes/nobody?forget=true")
            assert status == 404 and body["error"]["field"] == "name", body
            reader = await IdentityStore(running.hub.store).create_api_token("reader", ["read"])
            status, body = await api.call(
                "DELETE",
                f"/v1/nodes/{gone}?forget=true&force=true",
                headers={"Authorization": f"Bearer {reader.token}"},
            )
            assert status == 403 and body["error"]["code"] == "forbidden", body

            agents[gone].send_signal(signal.SIGSTOP)  # silent: NotReady, its work held
            await wait_for(lambda: api.get(f"/v1/nodes/{gone}"), lambda n: n["status"] == "NotReady")
            assert (await api.workload(workload_id))["placements"][0]["status"] == "Running"

            deleted = await asyncio.to_thread(client_cli, tmp_path, "delete", "node", gone)
            assert deleted.returncode == 0, deleted.stderr
            assert deleted.stdout.strip() == f"node/{gone} deleted (1 placement(s) placed again)"

            status, body = await api.call("GET", f"/v1/nodes/{gone}")
            assert status == 404, body
            listed = await asyncio.to_thread(client_cli, tmp_path, "get", "nodes")
            assert [r.split()[:2] for r in listed.stdout.splitlines()[1:]] == [[stay, "Ready"]]
            # Its replica was placed again on the other node; the old attempt is Lost.
            again = await api.wait_status(workload_id, "Running")
            await wait_for(
                lambda: api.workload(workload_id),
                lambda w: w["node"] == stay and len(w["placements"]) == 2,
            )
            old = next(p for p in (await api.workload(workload_id))["placements"] if p["id"] == placement_id)
            assert old["status"] == "Lost" and old["message"] == f"node {gone} deleted", old
            assert again["status"] == "Running"
            event = (await _events(api, "NodeDeleted"))[-1]
            assert event["object_id"] == gone and event["data"]["placements_lost"] == [placement_id]
            assert event["data"]["status"] == "NotReady" and event["data"]["forced"] is False
            clusters = (await api.get("/v1/clusters"))["items"]
            assert [(c["status"], c["nodes"]) for c in clusters] == [("Available", 1)]

            # A Ready node with force: deleted at once, its work Lost and Pending (no node left).
            status, body = await api.call("DELETE", f"/v1/nodes/{stay}?forget=1&force=1")
            assert status == 200, body
            assert body["deleted"] is True and body["forced"] is True and body["status"] == "Ready"
            assert len(body["placements_lost"]) == 1 and body["credentials_revoked"] is False
    finally:
        for agent in agents.values():
            with contextlib.suppress(ProcessLookupError):
                agent.send_signal(signal.SIGCONT)
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=10)


@pytest.fixture
def secured(tmp_path: Path):
    with secured_nats(tmp_path / "nats") as nats_server:
        yield nats_server


async def _join(running: Any, name: str) -> tuple[str, int, dict[str, Any]]:
    """Enrol a fresh key for ``name`` with a new join token: (seed, status, reply)."""
    token = await IdentityStore(running.hub.store).create_join_token("default", 60.0)
    seed = new_user_seed()
    body = {"token": token.token, "node": name, "public_key": public_key_of(seed)}
    async with (
        aiohttp.ClientSession() as session,
        session.post(running.url + "/v1/join", json=body) as response,
    ):
        return seed, response.status, await response.json()


async def test_a_revoked_node_shows_revoked_and_once_deleted_joins_afresh(
    secured: SecuredNats, sqlite_url, tmp_path
):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seed, status, reply = await _join(running, "edge-1")
        assert status == 201, reply
        inbox = agent_inbox_prefix("default", "edge-1")
        async with running_agents(secured.url, tmp_path, ["edge-1"], nats_seed=seed, inbox_prefix=inbox):
            node = await api.get("/v1/nodes/edge-1")
            assert (node["status"], node["revoked"]) == ("Ready", False)
            # A canary assignment, which must not outlive the node.
            registry = PolicyRegistry(running.hub.store)
            await api.call("POST", "/v1/policies", {**policy_body(FP32, METADATA)})
            status, _ = await api.call("POST", "/v1/policies/1/rollout", {"nodes": ["edge-1"]})
            assert status == 200 and await registry.assignments() == {"edge-1": 1}
            status, _ = await api.call("DELETE", "/v1/nodes/edge-1")  # revoke only
            assert status == 202
            node = await wait_for(lambda: api.get("/v1/nodes/edge-1"), lambda n: n["status"] == "NotReady")
            assert node["revoked"] is True
            listed = (await api.get("/v1/nodes"))["items"]
            assert RESOURCES["nodes"].table.row(listed[0])[:2] == ("edge-1", "NotReady,Revoked")

            status, body = await api.call("DELETE", "/v1/nodes/edge-1?forget=true")
            assert status == 200, body
            assert (body["status"], body["forced"], body["credentials_revoked"]) == ("NotReady", False, False)
            assert await api.nodes() == []
            assert await registry.assignments() == {}  # a node enrolled later under the name starts afresh
            # Deleted for good: a second delete finds nothing, the agent does not come back.
            status, _ = await api.call("DELETE", "/v1/nodes/edge-1?forget=true")
            assert status == 404
            await asyncio.sleep(1.0)
            assert await api.nodes() == []
        # A new join enrols the name afresh.
        _, status, reply = await _join(running, "edge-1")
        assert status == 201, reply
        kinds = [e["kind"] for e in (await api.get("/v1/events?object_id=edge-1"))["items"]]
        assert kinds.index("NodeDeleted") < len(kinds) - 1 and kinds[-1] == "NodeEnrolled", kinds
