"""NATS identities against a real nats-server started from the generated configuration.

The attacks of issue 10, each as a request that must fail: anonymous and unknown clients cannot
connect; a node's credentials cannot read other nodes' subjects, publish for another node, send
commands, or fake its own registration; forged reports are dropped; a revoked node is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from harness import SecuredNats, register_message, running_agents, running_hub, secured_nats, wait_for
from nats.aio.client import Client as NATS

from edgeplane_contract.credentials import NatsTls, new_user_seed, public_key_of
from edgeplane_contract.messages import (
    CommandV1,
    PlacementState,
    RegisterAckV1,
    RunSpec,
    StatusReportV1,
    Subjects,
    decode,
    encode,
)

from controlplane.bus.nats_auth import ServerTls, agent_inbox_prefix
from controlplane.store.identities import IdentityStore

SUBJECTS = Subjects(cluster="default", prefix="edgeplane.v1")


async def _join(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST /v1/join without any bearer token, as an agent does."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/join", json=body, timeout=aiohttp.ClientTimeout(total=10)) as response,
    ):
        return response.status, await response.json()


async def _enrol(running: Any, name: str) -> tuple[str, dict[str, Any]]:
    """A fresh nkey for ``name``, enrolled with a join token: (seed, the hub's reply)."""
    token = await IdentityStore(running.hub.store).create_join_token("default", 60.0)
    seed = new_user_seed()
    status, reply = await _join(
        running.url, {"token": token.token, "node": name, "public_key": public_key_of(seed)}
    )
    assert status == 201, reply
    return seed, reply


class Client:
    """A raw nats-py connection that records the server's asynchronous errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: NATS | None = None

    async def connect(self, url: str, **kwargs: Any) -> NATS:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        self.nc = await nats.connect(
            url, allow_reconnect=False, connect_timeout=3, error_cb=on_error, **kwargs
        )
        return self.nc

    async def violation(self, text: str, timeout: float = 5.0) -> str:
        """The first permissions violation that mentions ``text`` (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for error in self.errors:
                if "permissions violation" in error.lower() and text.lower() in error.lower():
                    return error
            await asyncio.sleep(0.05)
        raise AssertionError(f"no permissions violation for {text!r}; errors: {self.errors}")


@contextlib.asynccontextmanager
async def as_node(url: str, seed: str, node: str) -> AsyncIterator[Client]:
    """A client holding ``node``'s credentials, as an attacker who stole them would use them."""
    client = Client()
    await client.connect(url, nkeys_seed_str=seed, inbox_prefix=agent_inbox_prefix("default", node))
    try:
        yield client
    finally:
        assert client.nc is not None
        with contextlib.suppress(Exception):
            await client.nc.close()


@pytest.fixture
def secured(tmp_path: Path):
    with secured_nats(tmp_path / "nats") as nats_server:
        yield nats_server


async def _cannot_connect(url: str, **kwargs: Any) -> str:
    client = Client()
    # nats-py raises its Error for a refused key; a TLS handshake the server ends is an OSError.
    with pytest.raises((nats.errors.Error, OSError)) as refused:
        await client.connect(url, **kwargs)
    return str(refused.value)


async def test_anonymous_and_unknown_clients_cannot_connect(secured: SecuredNats, sqlite_url):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (_, api):
        assert (await api.get("/healthz"))["nats"] is True  # the hub itself is admitted
        assert "Authorization Violation" in await _cannot_connect(secured.url)
        assert "Authorization Violation" in await _cannot_connect(secured.url, nkeys_seed_str=new_user_seed())
    config = (secured.authority.config_path).read_text()
    assert secured.hub_seed not in config and public_key_of(secured.hub_seed) in config
    assert stat.S_IMODE(os.stat(secured.authority.config_path).st_mode) == 0o600


async def test_a_node_can_use_only_its_own_subjects(secured: SecuredNats, sqlite_url, tmp_path):
    """Stolen credentials of edge-1 can neither read edge-2's commands (with their env secrets) nor
    act for edge-2 or the hub: run, stop, heartbeat, report and registration are all refused."""
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seeds = {name: (await _enrol(running, name))[0] for name in ("edge-1", "edge-2")}
        async with (
            running_agents(
                secured.url, tmp_path, ["edge-1"], nats_seed=seeds["edge-1"],
                inbox_prefix=agent_inbox_prefix("default", "edge-1"),
            ),
            running_agents(
                secured.url, tmp_path, ["edge-2"], nats_seed=seeds["edge-2"],
                inbox_prefix=agent_inbox_prefix("default", "edge-2"),
            ),
            as_node(secured.url, seeds["edge-1"], "edge-1") as spy,
        ):  # fmt: skip
            assert spy.nc is not None
            seen: list[bytes] = []

            async def record(msg: Any) -> None:
                seen.append(bytes(msg.data))

            await spy.nc.subscribe(">", cb=record)
            await spy.violation('Subscription to ">"')
            await spy.nc.subscribe(SUBJECTS.command("edge-2"), cb=record)
            await spy.violation(f'Subscription to "{SUBJECTS.command("edge-2")}"')
            await spy.nc.subscribe(SUBJECTS.node("edge-2", ">"), cb=record)
            await spy.violation("Subscription to")

            workload = await api.post_workload(
                {
                    "name": "secret",
                    "command": ["sleep", "30"],
                    "env": {"DB_PASSWORD": "hunter2"},
                    "resources": {"cpu": 0.1, "memory": "16Mi"},
                    "affinity": {"nodes": ["edge-2"]},
                }
            )
            running_workload = await api.wait_status(workload, "Running")
            placement = running_workload["placements"][0]
            assert placement["node"] == "edge-2"
            assert not [m for m in seen if b"hunter2" in m], "edge-1 read edge-2's run command"

            # A forged run command to edge-2, and a forged stop of its workload.
            marker = tmp_path / "forged-ran"
            forged_run = CommandV1(
                command_id=uuid.uuid4().hex, kind="run", placement_id="p-forged", workload_id="w-forged",
                spec=RunSpec(command=["touch", str(marker)]),
            )  # fmt: skip
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await spy.nc.request(SUBJECTS.command("edge-2"), encode(forged_run), timeout=1)
            await spy.violation(f'Publish to "{SUBJECTS.command("edge-2")}"')
            forged_stop = CommandV1(
                command_id=uuid.uuid4().hex, kind="stop",
                placement_id=placement["id"], workload_id=workload,
            )  # fmt: skip
            await spy.nc.publish(SUBJECTS.command("edge-2"), encode(forged_stop))
            # Heartbeats and reports in edge-2's name, and the hub's own broadcast subject.
            for subject in (SUBJECTS.heartbeat("edge-2"), SUBJECTS.report("edge-2"), SUBJECTS.hub_hello()):
                await spy.nc.publish(subject, b"{}")
                await spy.violation(f'Publish to "{subject}"')

            # A forged report on edge-1's own subject, about edge-2's placement: dropped by the hub.
            forged_report = StatusReportV1(
                report_id=uuid.uuid4().hex, node="edge-1",
                placement=PlacementState(
                    placement_id=placement["id"], workload_id=workload, state="Succeeded", exit_code=0
                ),
            )  # fmt: skip
            await spy.nc.request(SUBJECTS.report("edge-1"), encode(forged_report), timeout=2)
            health = await wait_for(
                lambda: api.get("/healthz"), lambda h: h["rejected_messages"].get("report", 0) >= 1
            )
            assert health["rejected_messages"]["report"] >= 1

            await asyncio.sleep(1.0)  # time for any forged message to take effect, if it could
            assert not marker.exists()
            still = await api.workload(workload)
            assert still["status"] == "Running" and still["placements"][0]["status"] == "Running"
            await api.call("DELETE", f"/v1/workloads/{workload}")


async def test_a_node_cannot_register_as_another_or_lie_about_itself(secured: SecuredNats, sqlite_url):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seed, _ = await _enrol(running, "edge-1")
        async with as_node(secured.url, seed, "edge-1") as node:
            assert node.nc is not None
            # As a node nobody enrolled: the server refuses the subject.
            with pytest.raises((nats.errors.NoRespondersError, nats.errors.TimeoutError)):
                await node.nc.request(
                    SUBJECTS.register("fake"),
                    encode(register_message("fake")),
                    timeout=1,
                )
            await node.violation(f'Publish to "{SUBJECTS.register("fake")}"')
            # As itself, with 4,096 CPUs, or a heartbeat an hour apart: the hub refuses.
            for lie, field in (
                (
                    register_message("edge-1", cpu=4096),
                    "resources.cpu",
                ),
                (
                    register_message("edge-1", heartbeat_s=3600),
                    "heartbeat_interval_s",
                ),
            ):
                reply = await node.nc.request(SUBJECTS.register("edge-1"), encode(lie), timeout=2)
                ack = decode(reply.data, RegisterAckV1)
                assert not ack.accepted and ack.reason.startswith(field), ack.reason
            # Asking the hub to answer into another node's subject (its reply-to): dropped.
            await node.nc.publish(
                SUBJECTS.register("edge-1"),
                encode(register_message("edge-1")),
                reply=SUBJECTS.command("edge-2"),
            )
            health = await wait_for(
                lambda: api.get("/healthz"), lambda h: h["rejected_messages"].get("register", 0) >= 3
            )
            assert health["rejected_messages"]["register"] == 3
            assert await api.nodes() == []

        # An unenrolled name on a server that takes anyone (defence in depth at the hub).
        ack = await running.hub.handle_register("stranger", register_message("stranger"))
        assert not ack.accepted and "no active credentials" in ack.reason


async def test_join_tokens_are_single_use_short_lived_and_bound_to_their_cluster(
    secured: SecuredNats, sqlite_url
):
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        identities = IdentityStore(running.hub.store)
        token = await identities.create_join_token("default", 60.0)
        key = public_key_of(new_user_seed())
        status, reply = await _join(running.url, {"token": token.token, "node": "n1", "public_key": key})
        assert status == 201 and reply == {
            "node": "n1", "cluster": "default", "nats_url": secured.url,
            "subject_prefix": "edgeplane.v1", "inbox_prefix": "_INBOX_default.n1",
            "hub_public_key": public_key_of(secured.hub_seed),  # it signs policy versions
        }  # fmt: skip
        again = {"token": token.token, "node": "n2", "public_key": public_key_of(new_user_seed())}
        status, reply = await _join(running.url, again)
        assert status == 403 and "already used" in reply["error"]["message"]
        assert reply["error"]["field"] == "token"
        short = await identities.create_join_token("default", 0.2)
        await asyncio.sleep(0.4)
        status, reply = await _join(running.url, {**again, "token": short.token})
        assert status == 403 and "expired" in reply["error"]["message"]
        fresh = await identities.create_join_token("default", 60.0)
        status, reply = await _join(running.url, {**again, "token": fresh.token, "cluster": "elsewhere"})
        assert status == 422 and reply["error"]["field"] == "cluster"
        for body, field in (
            ({**again, "token": fresh.token, "public_key": "not-a-key"}, "public_key"),
            ({**again, "token": fresh.token, "node": "a.b"}, "node"),
            ({"node": "n2", "public_key": key}, "token"),
        ):
            status, reply = await _join(running.url, body)
            assert status == 422 and reply["error"]["field"] == field, reply
        status, reply = await _join(running.url, {**again, "token": "ep_join_" + "x" * 43})
        assert status == 403 and reply["error"]["field"] == "token"
        # The unused token still works after all these refusals.
        status, reply = await _join(running.url, {**again, "token": fresh.token})
        assert status == 201 and reply["node"] == "n2"
        audited = (await api.get("/v1/events?kind=NodeEnrolled"))["items"]
        assert [(e["object_id"], e["data"]["join_token_id"]) for e in audited] == [
            ("n1", token.id), ("n2", fresh.id)
        ]  # fmt: skip


async def test_a_revoked_node_is_dropped_and_cannot_connect_again(
    secured: SecuredNats, sqlite_url, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="edgeplane.nats")
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seed, _ = await _enrol(running, "edge-1")
        async with running_agents(
            secured.url,
            tmp_path,
            ["edge-1"],
            nats_seed=seed,
            inbox_prefix=agent_inbox_prefix("default", "edge-1"),
        ) as agents:
            assert (await api.get("/v1/nodes/edge-1"))["status"] == "Ready"
            status, revoked = await api.call("DELETE", "/v1/nodes/edge-1")
            assert status == 202 and revoked["credentials"] == "revoked"
            await wait_for(
                lambda: api.get("/v1/nodes/edge-1"), lambda n: n["status"] == "NotReady", timeout=5
            )
            assert "Authorization Violation" in await _cannot_connect(
                secured.url, nkeys_seed_str=seed, inbox_prefix=agent_inbox_prefix("default", "edge-1")
            )
            # The server closed the connection it had, and the agent's reconnects are refused.
            nc = agents[0].agent._nc
            await wait_for(lambda: _value(nc is None or not nc.is_connected), bool, timeout=10)
            await asyncio.sleep(1.5)
            assert (await api.get("/v1/nodes/edge-1"))["status"] == "NotReady"
            # The refused reconnects (every half second) are said once, with what to do.
            refused = [r.getMessage() for r in caplog.records if "Authorization Violation" in r.getMessage()]
            assert len(refused) == 1 and "must enrol again" in refused[0], refused
        status, missing = await api.call("DELETE", "/v1/nodes/nobody")
        assert status == 404 and missing["error"]["field"] == "name"


async def _value(value: Any) -> Any:
    return value


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _certificates(root: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA."""
    files = {name: str(root / name) for name in ("ca.crt", "ca.key", "server.crt", "server.key",
                                                  "client.crt", "client.key")}  # fmt: skip
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=edgeplane-test-ca",
             "-keyout", files["ca.key"], "-out", files["ca.crt"])  # fmt: skip
    ext = root / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        csr = root / f"{who}.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                 "-keyout", files[f"{who}.key"], "-out", str(csr))  # fmt: skip
        _openssl("x509", "-req", "-in", str(csr), "-CA", files["ca.crt"], "-CAkey", files["ca.key"],
                 "-CAcreateserial", "-days", "1", "-extfile", str(ext),
                 "-out", files[f"{who}.crt"])  # fmt: skip
    return files


async def test_nats_over_tls_with_client_certificates(tmp_path, sqlite_url):
    files = _certificates(tmp_path)
    tls = ServerTls(cert_file=files["server.crt"], key_file=files["server.key"], ca_file=files["ca.crt"])
    client_tls = NatsTls(ca_file=files["ca.crt"], cert_file=files["client.crt"], key_file=files["client.key"])
    with secured_nats(tmp_path / "nats", tls=tls) as secured:
        assert secured.url.startswith("tls://")
        overrides = {**secured.hub_overrides(), "nats_tls": client_tls}
        async with running_hub(secured.url, sqlite_url, **overrides) as (running, api):
            assert (await api.get("/healthz"))["nats"] is True
            seed, _ = await _enrol(running, "edge-1")
            # The right key without a client certificate is refused by TLS, before any key is read.
            no_cert = NatsTls(ca_file=files["ca.crt"]).context()
            await _cannot_connect(secured.url, nkeys_seed_str=seed, tls=no_cert)
            async with running_agents(
                secured.url, tmp_path, ["edge-1"], nats_seed=seed,
                inbox_prefix=agent_inbox_prefix("default", "edge-1"), nats_tls=client_tls,
            ):  # fmt: skip
                assert (await api.get("/v1/nodes/edge-1"))["status"] == "Ready"


def _one_ready(nodes: dict[str, Any]) -> bool:
    return any(node["status"] == "Ready" for node in nodes["items"])


async def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end off the event loop (the hub in this loop must keep answering)."""
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, cwd=cwd
    )


async def _controlplane(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return await _run([sys.executable, "-m", "controlplane.cli", *args], cwd=cwd)


async def test_an_agent_process_joins_once_and_keeps_its_credentials(
    secured: SecuredNats, sqlite_url, tmp_path
):
    """``controlplane agent-token create`` then ``edge-agent run --join TOKEN --hub URL``; a restart
    reuses the stored credentials; ``nats-config`` renders the node's key for an external server."""
    data = tmp_path / "data"
    data.mkdir()
    database = f"sqlite:///{data / 'edgeplane.sqlite3'}"
    async with running_hub(secured.url, database, **secured.hub_overrides()) as (running, api):
        made = await _controlplane(
            "agent-token", "create", "--ttl", "5m", "--database-url", database, cwd=tmp_path
        )
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        assert token.startswith("ep_join_") and "single use" in made.stderr
        work = tmp_path / "edge-1"
        command = [
            sys.executable, "-m", "edge_agent.cli", "run", "--name", "edge-1", "--heartbeat-interval", "0.25",
            "--cpu", "1", "--memory", "1Gi", "--work-dir", str(work), "--log-level", "WARNING",
            "--power-supply-path", str(tmp_path / "no-power"),
        ]  # fmt: skip
        agent = subprocess.Popen([*command, "--join", token, "--hub", running.url], stderr=subprocess.PIPE)
        try:
            await wait_for(lambda: api.get("/v1/nodes"), _one_ready, timeout=30)
        finally:
            agent.terminate()
            _, stderr = agent.communicate(timeout=20)
        credentials = work / "credentials.json"
        assert stat.S_IMODE(os.stat(credentials).st_mode) == 0o600
        stored = json.loads(credentials.read_text())
        assert stored["node"] == "edge-1" and stored["seed"].startswith("SU")
        assert stored["seed"].encode() not in stderr  # the secret is never logged
        assert stored["seed"] not in (secured.authority.config_path.read_text())

        # Restarted with the same (used) token: it is ignored, the stored credentials are used.
        agent = subprocess.Popen([*command, "--join", token, "--hub", running.url], stderr=subprocess.DEVNULL)
        try:
            boot = (await api.get("/v1/nodes/edge-1"))["last_heartbeat_at"]
            await wait_for(
                lambda: api.get("/v1/nodes/edge-1"),
                lambda n: n["status"] == "Ready" and n["last_heartbeat_at"] != boot,
                timeout=30,
            )
        finally:
            agent.terminate()
            agent.wait(timeout=20)

        rendered = await _controlplane(
            "nats-config", "--database-url", database, "--data-dir", str(data), cwd=tmp_path
        )
        assert rendered.returncode == 0, rendered.stderr
        assert public_key_of(stored["seed"]) in rendered.stdout and "allow_responses" in rendered.stdout
        assert stored["seed"] not in rendered.stdout and secured.hub_seed not in rendered.stdout

        refused = await _run(
            [*command, "--work-dir", str(tmp_path / "edge-2"), "--name", "edge-2", "--join", token,
             "--hub", running.url]
        )  # fmt: skip
        assert (
            refused.returncode == 1 and "join failed" in refused.stderr and "already used" in refused.stderr
        )


async def test_a_hub_whose_key_the_server_refuses_stops_at_once_with_one_line(secured: SecuredNats, tmp_path):
    started = time.monotonic()
    result = await _run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--nats", secured.url, "--port", "0",
         "--data-dir", str(tmp_path / "hub"), "--log-level", "ERROR"]
    )  # fmt: skip
    assert result.returncode == 1 and time.monotonic() - started < 20
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused this client" in lines[0] and "Authorization Violation" in lines[0], (
        lines
    )


async def test_offline_credentials_admit_a_node_within_seconds(secured: SecuredNats, tmp_path):
    """``agent-credentials create`` on the store, beside a running hub: the hub's sync loop admits
    the key on the server, and ``edge-agent run --credentials FILE`` registers with it."""
    database = f"sqlite:///{tmp_path / 'edgeplane.sqlite3'}"
    async with running_hub(secured.url, database, **secured.hub_overrides()) as (_, api):
        out = tmp_path / "edge-7.json"
        made = await _controlplane(
            "agent-credentials", "create", "--name", "edge-7", "--out", str(out), "--nats", secured.url,
            "--database-url", database, cwd=tmp_path,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600 and json.loads(out.read_text())["node"] == "edge-7"
        again = await _controlplane(
            "agent-credentials", "create", "--name", "edge-7", "--out", str(out), "--database-url", database,
            cwd=tmp_path,
        )  # fmt: skip
        assert again.returncode == 2 and "exists" in again.stderr
        agent = subprocess.Popen(
            [sys.executable, "-m", "edge_agent.cli", "run", "--credentials", str(out), "--heartbeat-interval",
             "0.25", "--cpu", "1", "--memory", "1Gi", "--work-dir", str(tmp_path / "edge-7"),
             "--power-supply-path", str(tmp_path / "no-power"), "--log-level", "WARNING"],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            node = await wait_for(
                lambda: api.call("GET", "/v1/nodes/edge-7"),
                lambda r: r[0] == 200 and r[1]["status"] == "Ready",
                timeout=30,
            )
            assert node[1]["cluster"] == "default"
        finally:
            agent.terminate()
            agent.wait(timeout=20)
