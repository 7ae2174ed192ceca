"""A node's identity bounds what a join and a registration may do (issue 20, items 1 and 3).

Against a real nats-server that admits enrolled nodes only, the hub, and a real ``edge-agent``
process: a join token cannot take over a live node (409, the token unused, the live agent still
connected and Ready, an event); a token bound to a name enrols no other; re-keying a live node
is an admin's act (``controlplane node rekey``, or a join with ``replace`` and the admin scope).
An enrolled node's registration must carry telemetry, offer no more than it shows, and claim no
more than at its first registration with its key until an admin approves it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from harness import SecuredNats, register_message, running_hub, secured_nats, wait_for
from nats.aio.client import Client as NATS

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.messages import RegisterAckV1, RegisterV1, Subjects, Telemetry, decode, encode

from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.store.identities import IdentityStore
from controlplane.store.models import JoinTokenRow

SUBJECTS = Subjects(cluster="default", prefix="edgeplane.v1")
GiB = 2**30


@pytest.fixture
def secured(tmp_path: Path):
    with secured_nats(tmp_path / "nats") as nats_server:
        yield nats_server


async def _join(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """POST /v1/join as an agent (or an attacker) does: no bearer token unless ``headers``."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/join", json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
        ) as response,
    ):
        return response.status, await response.json()


async def _connect(url: str, seed: str, node: str) -> NATS:
    return await nats.connect(
        url,
        nkeys_seed_str=seed,
        inbox_prefix=agent_inbox_prefix("default", node),
        allow_reconnect=False,
        connect_timeout=3,
    )


async def _cannot_connect(url: str, seed: str, node: str) -> None:
    with pytest.raises((nats.errors.Error, OSError)):
        nc = await _connect(url, seed, node)
        await nc.close()


async def _events(api: Any, kind: str) -> list[dict[str, Any]]:
    return list((await api.get(f"/v1/events?kind={kind}"))["items"])


async def _token_unused(running: Any, token_id: str) -> bool:
    async with running.hub.store.session() as session:
        row = await session.get(JoinTokenRow, token_id)
        return row is not None and row.used_at is None


async def _controlplane(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI to its end, off the event loop (the hub in this loop must keep answering)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "controlplane.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


async def test_a_fresh_join_token_cannot_take_over_a_live_agent(secured: SecuredNats, tmp_path, sqlite_url):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        identities = IdentityStore(running.hub.store)
        own = await identities.create_join_token("default", 60.0)
        agent = subprocess.Popen(
            [sys.executable, "-m", "edge_agent.cli", "run", "--name", "edge-2", "--heartbeat-interval",
             "0.25", "--cpu", "1", "--memory", "512Mi", "--work-dir", str(tmp_path / "edge-2"),
             "--log-level", "WARNING", "--power-supply-path", str(tmp_path / "no-power"),
             "--join", own.token, "--hub", running.url],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await wait_for(
                lambda: api.call("GET", "/v1/nodes/edge-2"),
                lambda r: r[0] == 200 and r[1]["status"] == "Ready",
                timeout=30,
            )
            # The attacker: any join token of the cluster, the live node's name, a key of its own.
            attack = await identities.create_join_token("default", 60.0)
            attacker_seed = new_user_seed()
            status, reply = await _join(
                running.url,
                {"token": attack.token, "node": "edge-2", "public_key": public_key_of(attacker_seed)},
            )
            assert status == 409, reply
            error = reply["error"]
            assert error["code"] == "conflict" and error["field"] == "node"
            assert "enrolled" in error["message"] and "controlplane node rekey edge-2" in error["message"]
            assert await _token_unused(running, attack.id)

            # The live agent keeps its key: still connected, its heartbeats go on, still Ready.
            before = (await api.get("/v1/nodes/edge-2"))["last_heartbeat_at"]
            await asyncio.sleep(3.0)
            node = await api.get("/v1/nodes/edge-2")
            assert node["status"] == "Ready" and node["last_heartbeat_at"] > before
            assert agent.poll() is None
            await _cannot_connect(secured.url, attacker_seed, "edge-2")
            seen = node["last_heartbeat_at"]
            await wait_for(
                lambda: api.get("/v1/nodes/edge-2"),
                lambda n: n["status"] == "Ready" and n["last_heartbeat_at"] > seen,
                timeout=10,
            )

            refused = await _events(api, "JoinRefused")
            assert [(e["object_id"], e["data"]["join_token_id"]) for e in refused] == [("edge-2", attack.id)]
            assert attack.token not in str(refused)
            enrolled = await _events(api, "NodeEnrolled")
            assert [e["data"]["join_token_id"] for e in enrolled] == [own.id]

            # The unused token still enrols a name that is free.
            status, reply = await _join(
                running.url,
                {"token": attack.token, "node": "edge-9", "public_key": public_key_of(new_user_seed())},
            )
            assert status == 201, reply
        finally:
            agent.terminate()
            agent.wait(timeout=20)


async def test_bound_tokens_and_rekeys_are_the_only_ways_to_a_name_and_a_new_key(
    secured: SecuredNats, tmp_path, sqlite_url
):
    database = sqlite_url
    async with running_hub(secured.url, database, **secured.hub_overrides()) as (running, api):
        identities = IdentityStore(running.hub.store)
        made = await _controlplane(
            "agent-token", "create", "--node", "edge-3", "--database-url", database, cwd=tmp_path
        )
        assert made.returncode == 0, made.stderr
        bound = made.stdout.strip()
        assert "node edge-3 only" in made.stderr
        first_seed = new_user_seed()
        status, reply = await _join(
            running.url, {"token": bound, "node": "edge-4", "public_key": public_key_of(first_seed)}
        )
        assert status == 403 and reply["error"]["field"] == "node", reply
        status, reply = await _join(
            running.url, {"token": bound, "node": "edge-3", "public_key": public_key_of(first_seed)}
        )
        assert status == 201, reply  # the refusal above did not use it up
        old = await _connect(secured.url, first_seed, "edge-3")
        await old.close()

        # replace without a bearer token, or with one without the admin scope: 403, the token unused.
        spare = await identities.create_join_token("default", 60.0)
        second_seed = new_user_seed()
        body = {
            "token": spare.token,
            "node": "edge-3",
            "public_key": public_key_of(second_seed),
            "replace": True,
        }
        status, reply = await _join(running.url, body)
        assert status == 403 and reply["error"]["field"] == "Authorization", reply
        nodes_only = await identities.create_api_token("operator", ["nodes", "read"])
        status, reply = await _join(running.url, body, {"Authorization": f"Bearer {nodes_only.token}"})
        assert status == 403 and reply["error"]["field"] == "Authorization", reply
        assert await _token_unused(running, spare.id)
        # With the admin scope: the key is replaced, audited as NodeRekeyed, the old key refused.
        admin = await identities.create_api_token("admin-2", ["admin"])
        status, reply = await _join(running.url, body, {"Authorization": f"Bearer {admin.token}"})
        assert status == 201, reply
        rekeyed = await _events(api, "NodeRekeyed")
        assert [(e["object_id"], e["data"]["by"]) for e in rekeyed] == [("edge-3", "admin-2")]
        await _cannot_connect(secured.url, first_seed, "edge-3")

        # controlplane node rekey: the key revoked, a token bound to the name printed once.
        rekey = await _controlplane("node", "rekey", "edge-3", "--database-url", database, cwd=tmp_path)
        assert rekey.returncode == 0, rekey.stderr
        fresh = rekey.stdout.strip()
        assert fresh.startswith("ep_join_") and fresh not in rekey.stderr
        await wait_for(
            lambda: _refused(secured.url, second_seed, "edge-3"), bool, timeout=15
        )  # the hub's sync loop applies the revocation
        third_seed = new_user_seed()
        status, reply = await _join(
            running.url, {"token": fresh, "node": "edge-5", "public_key": public_key_of(third_seed)}
        )
        assert status == 403 and reply["error"]["field"] == "node", reply
        status, reply = await _join(
            running.url, {"token": fresh, "node": "edge-3", "public_key": public_key_of(third_seed)}
        )
        assert status == 201, reply
        again = await _connect(secured.url, third_seed, "edge-3")
        await again.close()
        rekeyed = await _events(api, "NodeRekeyed")
        assert [e["data"]["by"].split(":")[0] for e in rekeyed] == ["admin-2", "cli"]
        missing = await _controlplane("node", "rekey", "nobody", "--database-url", database, cwd=tmp_path)
        assert missing.returncode == 1 and "never enrolled" in missing.stderr


async def _refused(url: str, seed: str, node: str) -> bool:
    try:
        nc = await _connect(url, seed, node)
    except (nats.errors.Error, OSError):
        return True
    await nc.close()
    return False


def _registration(node: str, *, cpu: float, memory: int, telemetry_memory: int | None) -> RegisterV1:
    msg = register_message(node, cpu=cpu, memory=memory)
    if telemetry_memory is not None:
        msg.telemetry = Telemetry(cpu_percent=5.0, memory_used_bytes=GiB, memory_total_bytes=telemetry_memory)
    return msg


async def test_an_enrolled_node_claims_no_more_than_its_telemetry_and_its_first_registration(
    secured: SecuredNats, tmp_path, sqlite_url
):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        identities = IdentityStore(running.hub.store)
        token = await identities.create_join_token("default", 60.0)
        seed = new_user_seed()
        status, reply = await _join(
            running.url, {"token": token.token, "node": "edge-6", "public_key": public_key_of(seed)}
        )
        assert status == 201, reply
        nc = await _connect(secured.url, seed, "edge-6")
        try:

            async def register(msg: RegisterV1) -> RegisterAckV1:
                answer = await nc.request(SUBJECTS.register("edge-6"), encode(msg), timeout=5)
                return decode(answer.data, RegisterAckV1)

            no_telemetry = await register(_registration("edge-6", cpu=2, memory=GiB, telemetry_memory=None))
            assert not no_telemetry.accepted and no_telemetry.reason.startswith("telemetry"), no_telemetry
            lying = await register(
                _registration("edge-6", cpu=2, memory=100 * GiB, telemetry_memory=25 * 10**9)
            )
            assert not lying.accepted and lying.reason.startswith("resources.memory"), lying
            assert "above_telemetry" in lying.reason
            first = await register(_registration("edge-6", cpu=2, memory=4 * GiB, telemetry_memory=16 * GiB))
            assert first.accepted, first
            more = await register(_registration("edge-6", cpu=8, memory=4 * GiB, telemetry_memory=16 * GiB))
            assert not more.accepted and more.reason.startswith("resources.cpu"), more
            assert "above_enrolled_capacity" in more.reason and "approve-capacity edge-6" in more.reason
            same = await register(_registration("edge-6", cpu=2, memory=4 * GiB, telemetry_memory=16 * GiB))
            assert same.accepted, same  # its first claim (or less) stays admitted

            refused = await _events(api, "RegistrationRefused")
            assert [e["data"]["rule"] for e in refused] == [
                "no_telemetry", "above_telemetry", "above_enrolled_capacity"
            ]  # fmt: skip
            assert all(e["object_id"] == "edge-6" for e in refused)
            health = await api.get("/healthz")
            assert health["rejected_messages"]["register"] == 3

            # An admin approves more: the next registration is admitted and is the new bound.
            approved = await _controlplane(
                "node", "approve-capacity", "edge-6", "--database-url", sqlite_url, cwd=tmp_path
            )
            assert approved.returncode == 0, approved.stderr
            assert (
                await register(_registration("edge-6", cpu=8, memory=4 * GiB, telemetry_memory=16 * GiB))
            ).accepted
            node = await api.get("/v1/nodes/edge-6")
            assert node["resources"]["cpu"] == 8
            assert [e["kind"] for e in await _events(api, "NodeCapacityApproved")] == ["NodeCapacityApproved"]
        finally:
            await nc.close()
