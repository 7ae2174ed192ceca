"""Leader failover with several hubs on one PostgreSQL store, under load, on real processes.

Each scenario makes a fresh PostgreSQL database, starts a nats-server, three hubs (``controlplane
serve``, each with its own API port, all on that database: the first leads, the others stand by
and forward the API to it) and N agents, then drives a steady load through all three replicas in
turn (marker-writing workloads and function invocations, half asynchronous, each with an
``Idempotency-Key``; a client that cannot connect to one replica tries the next, as a client
given several addresses does) while it hits the leader once:

- ``kill``: ``kill -9`` the leading hub;
- ``stall``: ``SIGSTOP`` the leading hub for the lease and 10 s more, then ``SIGCONT`` (it must
  find that it no longer leads, write nothing and stop);
- ``leaf-cut``: the NATS side is the production layout instead of one server: a 3-server
  hub-side cluster and two sites, each behind its own leaf server, ``--site-agents`` agents per
  site enrolled with their own nkeys; site-a's leaf connection goes through a relay that can be
  cut (the suite's, ``tests/functional/tcp_cut.py``): the hit cuts it for ``--cut-s`` seconds,
  then heals it. Site-a's agents keep their work and
  finish it on their own, the hub holds it as a partition (no leader changes), new work goes to
  site-b meanwhile, and when the link heals site-a's reports arrive.

It measures the time from the hit until another replica's ``/readyz`` says it leads
(``new_leader_s``), every API answer the load got from the replicas that were up (``api_errors``:
5xx other than a 503 with ``Retry-After``; ``api_unavailable``: those 503s, the documented answer
while no leader exists; ``refused``: connections the hit replica refused or dropped, which the
client took elsewhere), and, from the markers the work wrote (``bench/chaos.py``'s counting),
what was lost, what ran twice and what overlapped.

    python bench/failover.py [--agents 2] [--scenarios kill,stall,leaf-cut] [--hub-lease-s 15]
        [--site-agents 3] [--cut-s 20] [--json F]

writes ``{"failovers": [{"kind", "new_leader_s", "api_errors", "api_unavailable", "refused",
"lost", "duplicated", "overlapping", "hung", ...}]}``. The floor printed beside ``new_leader_s``
is the configured lease (a stalled leader cannot be replaced sooner) and, for a kill, the
standby's lock poll (1 s). For ``leaf-cut`` it also writes ``site_a_not_ready_s`` (from the cut
until the hub shows every site-a node NotReady), ``ready_again_s`` (from the heal until every
node is Ready), ``site_a_ended_during_cut`` (site-a work that ended while cut off, by its
markers) and ``placed_on_site_b_during_cut``.
Needs a PostgreSQL server (``--database-url``, default 127.0.0.1:5432, trust auth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from chaos import (
    FINAL,
    FUNCTION_SOURCE,
    FUNCTION_TIMEOUT_S,
    MARKED,
    Invocation,
    _count_invocations,
    _count_workloads,
    _headline,
    _run_as,
    drop_database,
    fresh_database,
    leads,
)

from controlplane.natsd import NatsServer, free_port

SCENARIOS = ("kill", "stall", "leaf-cut")
HUBS = 3
SITES = ("site-a", "site-b")  # leaf-cut: site-a's link is cut
FEDERATION = (
    "version: 1\ndefault_cluster: site-a\nclusters:\n"
    "  - {name: site-a, region: r1, autonomy_window_s: 300}\n"
    "  - {name: site-b, region: r2}\n"
)


class Replicas:
    """The load's view of the three API addresses: a call goes to the next replica in turn; a
    refused or dropped connection moves it on to the following one (counted)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.turn = 0
        self.answers: dict[str, int] = {
            "ok": 0,
            "api_errors": 0,
            "api_unavailable": 0,
            "refused": 0,
            "other": 0,
        }
        self.errors: list[str] = []

    async def call(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        *,
        timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> tuple[int, Any]:
        """One answer: from the first replica (in turn) that answers at all."""
        self.turn += 1
        last: Exception | None = None
        for i in range(len(self.urls)):
            url = self.urls[(self.turn + i) % len(self.urls)]
            try:
                async with session.request(
                    method, url + path, timeout=aiohttp.ClientTimeout(total=timeout_s), **kwargs
                ) as response:
                    body = await response.json(content_type=None)
                    self._count(response.status, response.headers, body, url + path)
                    return response.status, body
            except (aiohttp.ClientConnectionError, aiohttp.ServerDisconnectedError, TimeoutError) as exc:
                self.answers["refused"] += 1
                last = exc
        raise ConnectionError(f"no replica answered {method} {path}: {last!r}")

    def _count(self, status: int, headers: Any, body: Any, where: str) -> None:
        if status < 500:
            self.answers["ok" if status < 400 else "other"] += 1
        elif status == 503 and "Retry-After" in headers:
            self.answers["api_unavailable"] += 1
        else:
            self.answers["api_errors"] += 1
            self.errors.append(f"{status} {where}: {str(body)[:200]}")


@dataclass(frozen=True, slots=True)
class Enrolled:
    """An agent's credential as the topology renders it (``bus.authority.EnrolledNode``)."""

    node: str
    cluster: str
    public_key: str


class Fleet:
    """Three hubs on one database, the agents, and NATS: one server, or (``site_agents``) the
    hub-side cluster with a leaf server per site and ``site_agents`` enrolled agents per site."""

    def __init__(
        self,
        root: Path,
        database_url: str,
        agents: int,
        lease_s: float,
        run_as: str | None,
        *,
        site_agents: int = 0,
    ) -> None:
        self.root = root
        self.database_url = database_url
        self.lease_s = lease_s
        self.run_as = run_as
        self.nats_port = free_port()
        self.ports = [free_port() for _ in range(HUBS)]
        self.hubs: list[subprocess.Popen[bytes] | None] = [None] * HUBS
        self.sites = site_agents > 0
        if self.sites:
            self.agents = [f"{site[-1]}{i + 1}" for site in SITES for i in range(site_agents)]
        else:
            self.agents = [f"f{i + 1}" for i in range(agents)]
        self.agent_procs: list[subprocess.Popen[bytes]] = []
        self.nats: NatsServer | None = None
        self.topology: Any = None  # LocalTopology, for leaf-cut
        self.links: list[Any] = []  # a relay per hub-side server for site-a's leaf connection
        self.log = open(root / "fleet.log", "ab")

    @property
    def nats_url(self) -> str:
        if self.topology is not None:
            return str(self.topology.hub_url)
        return f"nats://127.0.0.1:{self.nats_port}"

    async def enrol_sites(self) -> None:
        """Leaf-cut: the topology (site-a's leaf connection through links), and every agent
        enrolled as an operator does offline (``agent-credentials create``): its seed, its
        public key in the store, its credentials file naming its site's leaf server."""
        # The suite's cuttable relay (one implementation for the tests and this bench).
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "functional"))
        from tcp_cut import CuttableRelay

        from edgeplane_contract.credentials import ensure_seed, new_user_seed, public_key_of
        from edgeplane_contract.enrolment import AgentCredentials

        from controlplane.bus.nats_auth import agent_inbox_prefix
        from controlplane.bus.topology import LocalTopology
        from controlplane.federation.config import load_federation
        from controlplane.store.identities import IdentityStore
        from controlplane.store.store import Store

        (self.root / "federation.yaml").write_text(FEDERATION, encoding="utf-8")
        federation = load_federation(self.root / "federation.yaml")
        hub_seed = ensure_seed(self.root / "hub.nkey")
        self.topology = LocalTopology(
            self.root / "nats", hub_public_key=public_key_of(hub_seed), federation=federation, sites=SITES
        )
        self.links = [await CuttableRelay(*address).start() for address in self.topology.leaf_listeners]
        self.topology.route_site("site-a", [("127.0.0.1", link.port) for link in self.links])
        store = await Store.open(self.database_url)  # migrates the fresh database
        enrolled = []
        try:
            identities = IdentityStore(store)
            for name in self.agents:
                cluster = f"site-{name[0]}"
                seed = new_user_seed()
                token = await identities.create_join_token(cluster, 60.0)
                await identities.redeem_join_token(token.token, node=name, public_key=public_key_of(seed))
                AgentCredentials(
                    node=name,
                    cluster=cluster,
                    seed=seed,
                    nats_url=self.topology.site(cluster).url,
                    subject_prefix=federation.cluster(cluster).subject_prefix,
                    inbox_prefix=agent_inbox_prefix(cluster, name),
                    hub_public_key=public_key_of(hub_seed),
                ).save(self.root / f"{name}.creds")
                enrolled.append(Enrolled(name, cluster, public_key_of(seed)))
        finally:
            await store.close()
        self.topology.start(enrolled)

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self) -> None:
        from controlplane.store.secrets import load_env_cipher

        # Replicas share one key for the env values sealed at rest (docs/operations.md).
        load_env_cipher(self.root / "secrets.key")
        if self.topology is None:
            self.nats = NatsServer(port=self.nats_port).start()
        for i in range(HUBS):
            self.start_hub(i)
            if i == 0:  # the first leads: the others start once it does
                deadline = time.monotonic() + 60
                while not (self.root / "h1" / "admin.token").exists():
                    assert time.monotonic() < deadline, "the first hub did not start"
                    time.sleep(0.2)
        for name in self.agents:
            self.agent_procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "edge_agent.cli",
                        "run",
                        *(
                            ["--credentials", str(self.root / f"{name}.creds")]
                            if self.sites
                            else ["--nats", self.nats_url, "--name", name]
                        ),
                        "--heartbeat-interval",
                        "0.5",
                        "--cpu",
                        "2",
                        "--memory",
                        "2Gi",
                        "--work-dir",
                        str(self.root / "agents" / name),
                        "--log-level",
                        "INFO",
                        "--power-supply-path",
                        str(self.root / "no-power"),
                        *(["--run-as", self.run_as] if self.run_as else []),
                    ],
                    stdout=self.log,
                    stderr=self.log,
                )
            )

    def start_hub(self, i: int) -> None:
        self.hubs[i] = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--nats", self.nats_url, "--port",
             str(self.ports[i]), "--data-dir", str(self.root / f"h{i + 1}"), "--rate-limit", "0",
             "--database-url", self.database_url, "--hub-lease-s", str(self.lease_s),
             "--advertise-url", self.url(i), "--secrets-key", str(self.root / "secrets.key"),
             "--log-level", "INFO", "--nats-connect-timeout", "60",
             *(["--nats-seed", str(self.root / "hub.nkey"), "--require-enrolment",
                "--federation", str(self.root / "federation.yaml")] if self.sites else [])],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip

    def stop(self) -> None:
        for process in [*self.agent_procs, *self.hubs]:
            if process is not None and process.poll() is None:
                with_cont(process)
                process.terminate()
        for process in [*self.agent_procs, *self.hubs]:
            if process is not None:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        if self.nats is not None:
            self.nats.stop()
        if self.topology is not None:
            self.topology.stop()
        self.log.close()

    async def close_links(self) -> None:
        for link in self.links:
            await link.close()


def with_cont(process: subprocess.Popen[bytes]) -> None:
    """A stopped process cannot die of SIGTERM: wake it first."""
    try:
        os.kill(process.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


async def _leader(session: aiohttp.ClientSession, fleet: Fleet, skip: int | None = None) -> int | None:
    for i in range(HUBS):
        if i != skip and fleet.hubs[i] is not None and await leads(session, fleet.url(i)):
            return i
    return None


async def run_scenario(kind: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"edgeplane-failover-{kind}-"))
    markers = root / "markers"
    markers.mkdir()
    os.chmod(root, 0o755)
    os.chmod(markers, 0o777)  # the agents run user code as an unprivileged user
    url, name = await fresh_database(args.database_url, "edgeplane_failover")
    site_agents = args.site_agents if kind == "leaf-cut" else 0
    fleet = Fleet(root, url, args.agents, args.hub_lease_s, _run_as(), site_agents=site_agents)
    workloads: list[str] = []
    created_at: dict[str, float] = {}
    nodes_of: dict[str, str] = {}
    invocations: list[Invocation] = []
    final: dict[str, str] = {}
    result: dict[str, Any] = {"kind": kind}
    try:
        if fleet.sites:
            await fleet.enrol_sites()
        await asyncio.to_thread(fleet.start)  # the links relay on this loop meanwhile
        token = (root / "h1" / "admin.token").read_text().strip()
        replicas = Replicas([fleet.url(i) for i in range(HUBS)])
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                up = [await leads(session, fleet.url(0))]
                try:
                    _, nodes = await replicas.call(session, "GET", "/v1/nodes")
                    ready = sum(n["status"] == "Ready" for n in nodes["items"])
                except (ConnectionError, KeyError, TypeError):
                    ready = 0
                if up[0] and ready == len(fleet.agents):
                    break
                await asyncio.sleep(0.5)
            else:
                raise RuntimeError("the fleet did not come up")
            function = {
                "name": "chaos",
                "runtime": "python",
                "source": FUNCTION_SOURCE,
                "handler": "handle",
                "memory": "64Mi",
                "timeout_s": FUNCTION_TIMEOUT_S,
                "env": {"OUT": str(markers)},
            }
            status, _ = await replicas.call(session, "POST", "/v1/functions", json=function)
            assert status in (200, 201), status
            replicas.answers = dict.fromkeys(replicas.answers, 0)  # the load's answers from here on
            calls: list[asyncio.Task[None]] = []

            async def retried(method: str, path: str, deadline_s: float, **kwargs: Any) -> Any:
                until = time.monotonic() + deadline_s
                while time.monotonic() < until:
                    try:
                        status, body = await replicas.call(session, method, path, **kwargs)
                        if status < 300:
                            return body
                    except ConnectionError:
                        pass
                    await asyncio.sleep(0.5)
                raise TimeoutError(f"{method} {path}: no answer in {deadline_s} s")

            async def submit_workloads() -> None:
                for i in range(args.workloads):
                    body = {
                        "name": f"fo-{i}",
                        "command": ["sh", "-c", MARKED.format(s=rng.randint(1, 3))],
                        "env": {"OUT": str(markers)},
                        "resources": {"cpu": 0.2, "memory": "32Mi"},
                    }
                    created = await retried(
                        "POST", "/v1/workloads", 120, json=body, headers={"Idempotency-Key": f"fo-{kind}-{i}"}
                    )
                    workloads.append(created["id"])
                    created_at[created["id"]] = time.time()
                    await asyncio.sleep(args.load_s / max(1, args.workloads))

            async def invoke(invocation: Invocation, body: dict[str, Any]) -> None:
                began = time.monotonic()
                until = began + FUNCTION_TIMEOUT_S + args.hub_lease_s + 30
                path = "/v1/functions/chaos/invoke" + ("?async=1" if invocation.mode == "async" else "")
                invocation_id = ""
                while time.monotonic() < until and invocation.outcome == "hung":
                    try:
                        if not invocation_id:
                            status, answer = await replicas.call(
                                session, "POST", path, json=body, headers={"Idempotency-Key": invocation.key},
                                timeout_s=FUNCTION_TIMEOUT_S + 5,
                            )  # fmt: skip
                            if invocation.mode == "sync" and status == 200:
                                invocation.outcome = "ok" if answer == {"key": body["key"]} else "failed"
                            elif invocation.mode == "async" and status in (200, 202):
                                invocation_id = answer["invocation_id"]
                            elif status < 500 and status != 409:
                                invocation.outcome, invocation.code = "failed", str(status)
                        else:
                            status, answer = await replicas.call(
                                session, "GET", f"/v1/invocations/{invocation_id}"
                            )
                            if status == 200 and answer.get("status") in FINAL:
                                ok = answer["status"] == "Succeeded" and answer.get("result") == {
                                    "key": body["key"]
                                }
                                invocation.outcome = "ok" if ok else "failed"
                                invocation.code = "" if ok else str((answer.get("error") or {}).get("code"))
                    except (ConnectionError, KeyError, TypeError, AttributeError):
                        pass
                    if invocation.outcome == "hung":
                        await asyncio.sleep(0.5)
                invocation.seconds = time.monotonic() - began

            async def submit_invocations() -> None:
                for i in range(args.invocations):
                    invocation = Invocation(key=f"fo-{kind}-{i}", mode="async" if i % 2 else "sync")
                    invocations.append(invocation)
                    body = {"key": invocation.key, "sleep": round(rng.uniform(0.2, 1.5), 2)}
                    calls.append(asyncio.create_task(invoke(invocation, body)))
                    await asyncio.sleep(args.load_s / max(1, args.invocations))

            async def statuses() -> dict[str, str]:
                try:
                    status, body = await replicas.call(session, "GET", "/v1/nodes")
                    return {n["name"]: n["status"] for n in body["items"]} if status == 200 else {}
                except (ConnectionError, KeyError, TypeError):
                    return {}

            async def cut_site() -> None:
                """Site-a's leaf connection down for ``--cut-s``, then up again."""
                await asyncio.sleep(args.load_s / 3)
                site_a = [n for n in fleet.agents if n.startswith("a")]
                result["cut_at"], began = time.time(), time.monotonic()
                for link in fleet.links:
                    link.cut()
                print(f"  cut site-a's leaf connection for {args.cut_s:.0f} s", flush=True)
                result["site_a_not_ready_s"] = None
                while time.monotonic() - began < args.cut_s:
                    now = await statuses()
                    if all(now.get(n) == "NotReady" for n in site_a):
                        result["site_a_not_ready_s"] = round(time.monotonic() - began, 2)
                        break
                    await asyncio.sleep(0.2)
                print(f"  site-a NotReady on the hub after {result['site_a_not_ready_s']} s", flush=True)
                await asyncio.sleep(max(0.0, args.cut_s - (time.monotonic() - began)))
                for link in fleet.links:
                    link.heal()
                result["healed_at"], healed = time.time(), time.monotonic()
                result["ready_again_s"] = None
                while time.monotonic() - healed < 120:
                    now = await statuses()
                    if len(now) == len(fleet.agents) and set(now.values()) == {"Ready"}:
                        result["ready_again_s"] = round(time.monotonic() - healed, 2)
                        break
                    await asyncio.sleep(0.2)
                print(f"  healed; every node Ready after {result['ready_again_s']} s", flush=True)
                result["new_leader_s"], result["new_leader"] = None, None  # no hub was hit

            async def hit() -> None:
                if kind == "leaf-cut":
                    await cut_site()
                    return
                await asyncio.sleep(args.load_s / 3)
                leader = await _leader(session, fleet)
                assert leader is not None, "no leader before the hit"
                process = fleet.hubs[leader]
                assert process is not None
                began = time.monotonic()
                if kind == "kill":
                    process.kill()
                    process.wait()
                else:
                    os.kill(process.pid, signal.SIGSTOP)
                print(f"  {kind} the leader (hub {leader + 1})", flush=True)
                new = None
                while time.monotonic() - began < args.hub_lease_s + 60:
                    new = await _leader(session, fleet, skip=leader)
                    if new is not None:
                        break
                    await asyncio.sleep(0.1)
                result["new_leader_s"] = round(time.monotonic() - began, 2) if new is not None else None
                result["new_leader"] = None if new is None else f"hub {new + 1}"
                print(f"  new leader {result['new_leader']} after {result['new_leader_s']} s", flush=True)
                if kind == "stall":
                    await asyncio.sleep(max(0.0, args.hub_lease_s + 10 - (time.monotonic() - began)))
                    os.kill(process.pid, signal.SIGCONT)
                    try:
                        code = await asyncio.to_thread(process.wait, 30)
                    except subprocess.TimeoutExpired:
                        code = None
                    result["woken_leader_exit"] = code
                    print(f"  the stalled hub, woken, exited with {code}", flush=True)

            await asyncio.gather(submit_workloads(), submit_invocations(), hit())
            await asyncio.gather(*calls)
            deadline = time.monotonic() + args.settle_s
            while time.monotonic() < deadline:
                for workload_id in workloads:
                    if final.get(workload_id) not in FINAL:
                        try:
                            status, body = await replicas.call(session, "GET", f"/v1/workloads/{workload_id}")
                            if status == 200:
                                final[workload_id] = body["status"]
                                nodes_of[workload_id] = body.get("node") or ""
                        except (ConnectionError, KeyError, TypeError):
                            pass
                if all(final.get(w) in FINAL for w in workloads):
                    break
                await asyncio.sleep(1.0)
        counted_w = _count_workloads(markers, workloads, final)
        counted_i = _count_invocations(markers, invocations)
        result.update(_headline(counted_w, counted_i))
        result.update({k: replicas.answers[k] for k in ("api_errors", "api_unavailable", "refused")})
        result["answers"] = replicas.answers
        result["error_samples"] = replicas.errors[:5]
        result["workloads"] = counted_w
        result["invocations"] = {k: v for k, v in counted_i.items() if k != "failures"}
        if kind == "leaf-cut" and "healed_at" in result:
            result.update(_site_figures(markers, workloads, nodes_of, created_at, result))
        return result
    finally:
        fleet.stop()
        await fleet.close_links()
        await drop_database(args.database_url, name)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _site_figures(
    markers: Path,
    workloads: list[str],
    nodes_of: dict[str, str],
    created_at: dict[str, float],
    result: dict[str, Any],
) -> dict[str, Any]:
    """Leaf-cut: site-a work that ended while its site was cut off (its end marker's time), and
    work created during the cut that ran on site-b."""
    cut, healed = result["cut_at"], result["healed_at"]
    ended_during = 0
    for workload_id in workloads:
        if not nodes_of.get(workload_id, "").startswith("a"):
            continue
        path = markers / workload_id
        lines = path.read_text().splitlines() if path.exists() else []
        ends = [float(f[2]) for f in (line.split() for line in lines) if len(f) == 3 and f[0] == "end"]
        ended_during += any(cut <= t <= healed for t in ends)
    during = [w for w in workloads if cut <= created_at.get(w, 0.0) <= healed]
    return {
        "site_a_ended_during_cut": ended_during,
        "created_during_cut": len(during),
        "placed_on_site_b_during_cut": sum(nodes_of.get(w, "").startswith("b") for w in during),
        "ran_on_site_a": sum(nodes_of.get(w, "").startswith("a") for w in workloads),
        "ran_on_site_b": sum(nodes_of.get(w, "").startswith("b") for w in workloads),
    }


def _table(failovers: list[dict[str, Any]], lease_s: float) -> str:
    head = (f"{'kind':<6} {'new leader s':>12} {'floor s':>7} {'api 5xx':>7} {'503+RA':>6} {'refused':>7} "
            f"{'accepted':>8} {'lost':>4} {'twice':>5} {'overlap':>7} {'hung':>4}")  # fmt: skip
    rows = [head, "-" * len(head)]
    for f in failovers:
        floor = {"kill": "1.0", "stall": f"{lease_s:.1f}"}.get(f["kind"], "-")
        rows.append(
            f"{f['kind']:<6} {f['new_leader_s']!s:>12} {floor:>7} {f['api_errors']:>7} "
            f"{f['api_unavailable']:>6} {f['refused']:>7} {f['accepted']:>8} {f['lost']:>4} "
            f"{f['duplicated']:>5} {f['overlapping']:>7} {f['hung']:>4}"
        )
    for f in failovers:
        if f["kind"] == "leaf-cut" and "site_a_ended_during_cut" in f:
            rows.append(
                f"leaf-cut: site-a NotReady on the hub {f['site_a_not_ready_s']} s after the cut, every "
                f"node Ready {f['ready_again_s']} s after the heal; site-a work ended while cut off "
                f"{f['site_a_ended_during_cut']}; created during the cut {f['created_during_cut']}, "
                f"on site-b {f['placed_on_site_b_during_cut']}; ran on site-a / site-b "
                f"{f['ran_on_site_a']} / {f['ran_on_site_b']}"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, from {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--workloads", type=int, default=30, help="marker-writing workloads per scenario")
    parser.add_argument("--invocations", type=int, default=30, help="invocations per scenario (half async)")
    parser.add_argument("--load-s", type=float, default=45.0, help="how long the load goes on")
    parser.add_argument("--settle-s", type=float, default=120.0, help="how long to wait for every workload")
    parser.add_argument("--hub-lease-s", type=float, default=15.0, help="the hubs' --hub-lease-s")
    parser.add_argument("--site-agents", type=int, default=3, help="leaf-cut: agents per site (3+)")
    parser.add_argument("--cut-s", type=float, default=20.0, help="leaf-cut: how long the link is down")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--keep", action="store_true", help="keep each scenario's directory")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in SCENARIOS]
    if unknown:
        parser.error(f"--scenarios: unknown {unknown[0]!r} (known: {', '.join(SCENARIOS)})")
    rng = random.Random(args.seed)
    failovers = []
    for kind in kinds:
        print(f"scenario {kind}", flush=True)
        failovers.append(asyncio.run(run_scenario(kind, args, rng)))
    print(_table(failovers, args.hub_lease_s))
    if args.json:
        Path(args.json).write_text(json.dumps({"failovers": failovers}, indent=2) + "\n", encoding="utf-8")
    bad = any(f["lost"] or f["duplicated"] or f["overlapping"] or f["api_errors"] for f in failovers)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
