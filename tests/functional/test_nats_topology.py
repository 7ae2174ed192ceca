"""Sites behind leaf nodes: a 3-server hub-side NATS cluster, two sites each with its own leaf
server, a real hub and real agents, with nkeys and permissions throughout (controlplane/bus/topology.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from harness import running_agents, running_hub, wait_for

from edgeplane_contract.credentials import ensure_seed, new_user_seed, public_key_of
from edgeplane_contract.messages import Subjects

from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.bus.topology import LocalTopology
from controlplane.federation.config import ClusterConfig, FederationConfig
from controlplane.store.identities import IdentityStore

FEDERATION = FederationConfig(
    clusters=[ClusterConfig(name="site-a", region="r1"), ClusterConfig(name="site-b", region="r2")],
    default_cluster="site-a",
)


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[tuple[LocalTopology, str]]:
    seed = ensure_seed(tmp_path / "hub.nkey")
    topo = LocalTopology(
        tmp_path / "nats",
        hub_public_key=public_key_of(seed),
        federation=FEDERATION,
        sites=["site-a", "site-b"],
        servers=3,
    )
    with topo:
        yield topo, seed


async def _enrol(running: Any, name: str, cluster: str) -> tuple[str, dict[str, Any]]:
    token = await IdentityStore(running.hub.store).create_join_token(cluster, 60.0)
    seed = new_user_seed()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + "/v1/join",
            json={"token": token.token, "node": name, "public_key": public_key_of(seed)},
            timeout=aiohttp.ClientTimeout(total=10),
        ) as response,
    ):
        reply = await response.json()
        assert response.status == 201, reply
    return seed, reply


def _agents(topo: LocalTopology, tmp_path: Path, name: str, cluster: str, seed: str) -> Any:
    return running_agents(
        topo.site(cluster).url,
        tmp_path,
        [name],
        cluster=cluster,
        nats_seed=seed,
        inbox_prefix=agent_inbox_prefix(cluster, name),
    )


async def test_agents_behind_leaf_nodes_enrol_register_and_run_work_across_a_nats_cluster(
    topology: tuple[LocalTopology, str], sqlite_url: str, tmp_path: Path
) -> None:
    topo, hub_seed = topology
    async with running_hub(
        topo.hub_url,
        sqlite_url,
        FEDERATION,
        nats_authority=topo.authority,
        nats_seed=hub_seed,
        require_enrolment=True,
    ) as (running, api):
        seed_a, reply_a = await _enrol(running, "a1", "site-a")
        seed_b, reply_b = await _enrol(running, "b1", "site-b")
        # The join answer sends each agent to its own site's leaf server.
        assert reply_a["nats_url"] == topo.site("site-a").url
        assert reply_b["nats_url"] == topo.site("site-b").url
        async with (
            _agents(topo, tmp_path, "a1", "site-a", seed_a),
            _agents(topo, tmp_path, "b1", "site-b", seed_b),
        ):
            for cluster, node in (("site-a", "a1"), ("site-b", "b1")):
                workload = await api.post_workload(
                    {"name": f"in-{cluster}", "command": ["true"], "affinity": {"clusters": [cluster]}}
                )
                done = await api.wait_status(workload, "Succeeded")
                assert done["node"] == node

            # A hub-side server dies: the hub and the leaf connections move to the others, and
            # work still reaches both sites.
            topo.core[0].stop()
            for cluster, node in (("site-a", "a1"), ("site-b", "b1")):
                workload = await api.post_workload(
                    {"name": f"again-{cluster}", "command": ["true"], "affinity": {"clusters": [cluster]}}
                )
                done = await api.wait_status(workload, "Succeeded", timeout=30)
                assert done["node"] == node


async def test_a_site_cannot_speak_for_another_cluster_even_with_its_own_leaf_server(
    topology: tuple[LocalTopology, str], tmp_path: Path
) -> None:
    """What a leaf connection carries is bounded on the hub side: a client with every right on
    site-a's leaf server (its operator, or an attacker who owns it) reaches the hub side only on
    site-a's agent subjects; site-b's and other subjects never arrive."""
    topo, hub_seed = topology
    hub = await nats.connect([s.url for s in topo.core], nkeys_seed_str=hub_seed)
    received: list[str] = []

    async def record(msg: Any) -> None:
        received.append(msg.subject)

    a, b = Subjects(cluster="site-a"), Subjects(cluster="site-b")
    for subject in (
        a.agent_wildcard("register"),
        b.agent_wildcard("register"),
        a.agent_wildcard("cmd"),
        "x.>",
    ):
        await hub.subscribe(subject, cb=record)
    await hub.flush()

    # Site-a's leaf server, with an all-powerful local user added by whoever owns it.
    leaf = topo.site("site-a")
    assert leaf.config_file is not None
    owner_seed = new_user_seed()
    text = leaf.config_file.read_text()
    owner = json.dumps(
        {
            "nkey": public_key_of(owner_seed),
            "permissions": {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}},
        }
    )
    text = text.replace("  users = [\n", f"  users = [\n    {owner}\n", 1)
    leaf.config_file.write_text(text)
    leaf.reload()
    client = await nats.connect(leaf.url, nkeys_seed_str=owner_seed)
    try:
        await asyncio.sleep(0.5)  # the hub's interest crosses the leaf connection
        await client.publish(a.register("a9"), b"allowed: site-a's own subject")
        await client.publish(b.register("b9"), b"another cluster")
        await client.publish(a.command("a9"), b"a hub -> agent subject")
        await client.publish("x.y", b"anything else")
        await client.flush()
        await wait_for(lambda: _value(list(received)), lambda r: a.register("a9") in r, timeout=5)
        await asyncio.sleep(0.5)
        assert received == [a.register("a9")]
    finally:
        await client.close()
        await hub.close()


async def _value(value: Any) -> Any:
    return value
