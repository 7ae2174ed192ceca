"""Sites behind leaf nodes: a 3-server hub-side NATS cluster, two sites each with its own leaf
server, a real hub and real agents, with nkeys and permissions throughout (controlplane/bus/topology.py)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from harness import enrol, running_agents, running_hub, wait_for
from tcp_cut import CuttableRelay

from edgeplane_contract.credentials import ensure_seed, new_user_seed, public_key_of
from edgeplane_contract.messages import Subjects

from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.bus.topology import LocalTopology
from controlplane.federation.config import ClusterConfig, FederationConfig
from controlplane.natsd import find_nats_server

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
    # Shown only when the test fails (captured stdout): what the servers said, e.g. which
    # reloads they did and whom they refused.
    for log_file in sorted((tmp_path / "nats").glob("*.log")):
        print(f"--- {log_file.name}\n" + "\n".join(log_file.read_text(errors="replace").splitlines()[-40:]))


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
        seed_a, reply_a = await enrol(running, "a1", "site-a")
        seed_b, reply_b = await enrol(running, "b1", "site-b")
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
            # A node enrolled while that server is down: the others and its site's leaf server
            # take its key (the dead server gets its file for when it comes back), and it runs.
            seed_b2, _ = await enrol(running, "b2", "site-b")
            async with _agents(topo, tmp_path, "b2", "site-b", seed_b2):
                workload = await api.post_workload(
                    {"name": "on-b2", "command": ["true"], "affinity": {"nodes": ["b2"]}}
                )
                assert (await api.wait_status(workload, "Succeeded", timeout=30))["node"] == "b2"
            assert public_key_of(seed_b2) in topo.site("site-b").config_file.read_text()  # type: ignore[union-attr]


MARKED = [
    "sh",
    "-c",
    'echo started >> "$OUT/$EDGEPLANE_WORKLOAD_ID"; sleep 4; echo done >> "$OUT/$EDGEPLANE_WORKLOAD_ID"',
]


async def test_a_site_cut_off_from_the_hub_side_keeps_its_work_and_reconciles_when_it_heals(
    sqlite_url: str, tmp_path: Path, shared_dir: Path
) -> None:
    """Site-a's leaf connection goes through a link that is cut (its uplink down): its agents stay
    connected to their leaf server and finish their work locally; the hub sees a partition and
    holds that work (not Lost, not placed again); site-b is unaffected; when the link heals the
    site's reports arrive, its work is Succeeded, what waited for it is placed there, and nothing
    ran twice."""
    federation = FederationConfig(
        clusters=[
            # A grace shorter than the cut: without the partition rule the site's work would be
            # Lost and placed again while it still runs there.
            ClusterConfig(name="site-a", region="r1", autonomy_window_s=120.0, eviction_grace_s=2.0),
            ClusterConfig(name="site-b", region="r2"),
        ],
        default_cluster="site-a",
    )
    seed = ensure_seed(tmp_path / "hub.nkey")
    topo = LocalTopology(
        tmp_path / "nats",
        hub_public_key=public_key_of(seed),
        federation=federation,
        sites=["site-a", "site-b"],
        servers=3,
    )
    links = [await CuttableRelay(*address).start() for address in topo.leaf_listeners]
    topo.route_site("site-a", [("127.0.0.1", link.port) for link in links])
    try:
        with topo:
            async with running_hub(
                topo.hub_url,
                sqlite_url,
                federation,
                nats_authority=topo.authority,
                nats_seed=seed,
                require_enrolment=True,
            ) as (running, api):
                seeds = {
                    name: (await enrol(running, name, "site-a" if name.startswith("a") else "site-b"))[0]
                    for name in ("a1", "a2", "a3", "b1")
                }
                async with (
                    _agents(topo, tmp_path, "a1", "site-a", seeds["a1"]),
                    _agents(topo, tmp_path, "a2", "site-a", seeds["a2"]),
                    _agents(topo, tmp_path, "a3", "site-a", seeds["a3"]),
                    _agents(topo, tmp_path, "b1", "site-b", seeds["b1"]),
                ):
                    await _cut_and_heal(api, links, shared_dir)
    finally:
        for link in links:
            await link.close()


async def _statuses(api: Any) -> dict[str, str]:
    return {n["name"]: n["status"] for n in await api.nodes()}


async def _cut_and_heal(api: Any, links: list[Any], shared_dir: Path) -> None:
    await wait_for(lambda: _statuses(api), lambda s: len(s) == 4 and set(s.values()) == {"Ready"})
    env = {"OUT": str(shared_dir)}
    on_a = {
        node: await api.post_workload(
            {"name": f"on-{node}", "command": MARKED, "env": env, "affinity": {"nodes": [node]}}
        )
        for node in ("a1", "a2", "a3")
    }
    for workload_id in on_a.values():
        await api.wait_status(workload_id, "Running", timeout=20)

    for link in links:  # the site's uplink goes down
        link.cut()
    statuses = await wait_for(
        lambda: _statuses(api), lambda s: all(s[n] == "NotReady" for n in ("a1", "a2", "a3")), timeout=20
    )
    assert statuses["b1"] == "Ready", statuses
    # Held, as a partition's work is: not Lost, not placed anywhere else.
    for workload_id in on_a.values():
        held = await api.workload(workload_id)
        assert held["status"] == "Running" and [p["status"] for p in held["placements"]] == ["Running"], held
    # The other site is unaffected: work is placed there and runs while site-a is cut off.
    on_b = await api.post_workload(
        {"name": "on-b", "command": ["true"], "affinity": {"clusters": ["site-b"]}}
    )
    assert (await api.wait_status(on_b, "Succeeded", "Failed", timeout=20))["node"] == "b1"
    # Work for the cut site waits for it.
    for_a = await api.post_workload(
        {"name": "for-a", "command": MARKED, "env": env, "affinity": {"clusters": ["site-a"]}}
    )
    # The site finishes its work on its own meanwhile (the markers), unheard by the hub.
    for workload_id in on_a.values():
        await wait_for(
            lambda w=workload_id: _marker(shared_dir, w), lambda text: text.endswith("done\n"), timeout=20
        )
    assert (await api.workload(for_a))["status"] == "Pending"
    for workload_id in on_a.values():
        assert (await api.workload(workload_id))["status"] == "Running"

    for link in links:  # healed: the leaf server reconnects, the agents' reports arrive
        link.heal()
    for workload_id in on_a.values():
        done = await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30)
        assert done["status"] == "Succeeded" and len(done["placements"]) == 1, done
    placed = await api.wait_status(for_a, "Succeeded", "Failed", timeout=30)
    assert placed["status"] == "Succeeded" and placed["node"] in ("a1", "a2", "a3"), placed
    await wait_for(lambda: _statuses(api), lambda s: set(s.values()) == {"Ready"}, timeout=20)
    for workload_id in [*on_a.values(), for_a]:  # each ran once
        assert await _marker(shared_dir, workload_id) == "started\ndone\n"


async def _marker(shared_dir: Path, workload_id: str) -> str:
    path = shared_dir / workload_id
    return path.read_text() if path.exists() else ""


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


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
    )


def test_nats_config_renders_the_hub_side_block_and_a_sites_leaf_file_for_production(tmp_path: Path) -> None:
    """An operator's flow: ``nats-config --sites`` for the hub-side servers, ``nats-config --site
    X --hub-side ...`` for X's leaf server; nats-server accepts both files."""
    fed = tmp_path / "federation.yaml"
    fed.write_text(
        "version: 1\ndefault_cluster: site-a\nclusters:\n"
        "  - {name: site-a, region: r1}\n  - {name: site-b, region: r2}\n"
    )
    common = ("--data-dir", str(tmp_path / "data"), "--federation", str(fed))
    assert _cli("migrate", "--data-dir", str(tmp_path / "data"), cwd=tmp_path).returncode == 0
    made = _cli(
        "agent-credentials", "create", "--name", "a1", "--cluster", "site-a",
        "--out", str(tmp_path / "a1.json"), "--nats", "nats://127.0.0.1:4333", *common, cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    a1_key = public_key_of(json.loads((tmp_path / "a1.json").read_text())["seed"])

    hub_side = _cli("nats-config", "--sites", "site-a,site-b", *common, cwd=tmp_path)
    assert hub_side.returncode == 0, hub_side.stderr
    site_a_seed = (tmp_path / "data" / "site-site-a.nkey").read_text().strip()
    assert public_key_of(site_a_seed) in hub_side.stdout and site_a_seed not in hub_side.stdout
    assert a1_key not in hub_side.stdout  # a1 connects to its site's leaf, not to the hub side
    _accepted_by_nats_server(tmp_path / "core.conf", 'listen: "127.0.0.1:4999"\n' + hub_side.stdout)

    out = tmp_path / "site-a.conf"
    leaf = _cli(
        "nats-config", "--site", "site-a", "--hub-side", "10.0.0.1:7422,10.0.0.2:7422", "--listen",
        "127.0.0.1:4333", "--out", str(out), *common, cwd=tmp_path,
    )  # fmt: skip
    assert leaf.returncode == 0, leaf.stderr
    assert "copy it to the site's leaf server only" in leaf.stderr
    text = out.read_text()
    assert a1_key in text and site_a_seed in text and "nats-leaf://10.0.0.2:7422" in text
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    _accepted_by_nats_server(out, text)

    for extra, named in (
        (["--site", "nowhere", "--hub-side", "h:1"], "--site: unknown cluster 'nowhere'"),
        (["--site", "site-a"], "--hub-side: --site needs"),
        (["--sites", "site-a", "--hub-side", "h:1"], "--hub-side: only with --site"),
        (["--site", "site-a", "--hub-side", "no-port"], "--hub-side: 'no-port' is not HOST:PORT"),
    ):
        refused = _cli("nats-config", *extra, *common, cwd=tmp_path)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and named in lines[0], (extra, refused.stderr)


def _accepted_by_nats_server(path: Path, text: str) -> None:
    path.write_text(text)
    checked = subprocess.run(
        [find_nats_server(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
