"""A chaos run anyone can repeat: kill -9 the hub, the nats-server and agents under load, cut an agent
off the network, then count what was lost and what ran twice.

Each scenario starts its own nats-server, hub (``controlplane serve``) and N agents (``edge-agent
run``) as separate processes, submits a bounded load of marker-writing workloads and function
invocations (synchronous and asynchronous, each with an ``Idempotency-Key`` and retried while the hub
is away, as a client does), and hits one component K times at moments drawn from the seed (at least
5 s after the previous hit's recovery):

- ``nats``: ``kill -9`` the nats-server (back after 2-5 s);
- ``hub``: ``kill -9`` the hub (back after 2-5 s, same port and store);
- ``agent``: ``kill -9`` each agent K times (back after 2-5 s, same work dir);
- ``partition``: cut the first agent off the network for 5-20 s (it runs in a network namespace of
  its own, joined by a veth pair whose host end goes down; root and ``ip`` needed, else skipped with
  the reason): it keeps serving meanwhile;
- ``mixed``: all of the above kills in one run (no partition).

Then it waits for everything to end and counts, from the markers the work itself wrote: workloads
accepted, completed, lost (never completed), completed twice, overlapping (two attempts alive at
once), started twice; invocations answered, failed (an error answer), hung (no final answer within
the function's timeout + 10 s), run twice, and finished-but-failed (ran to its end, reported failed:
a result thrown away).

    python bench/chaos.py --agents 3 --kills 10 --seed 42 [--scenarios nats,hub,agent,partition]
                          [--hubs 3 --database-url postgresql://...] [--json out.json]

``--hubs N`` (N > 1) runs N hub replicas on a fresh PostgreSQL database (``--database-url``'s
server, dropped afterwards) instead of one hub on SQLite: the first leads, the others stand by
and forward the API to it (``docs/operations.md``), and the load's client sends each call to the
next replica in turn, moving on when one refuses the connection. A ``hub`` hit then kills the hub
leading at that moment (the one a kill hurts: a standby takes over within its lock poll).

``--json`` writes ``{"scenarios": {NAME: {"accepted", "completed", "lost", "duplicated",
"overlapping", "hung", "workloads": {...}, "invocations": {...}}}, "totals": {...}}``: the headline
keys add workloads and invocations (lost: workloads never completed + invocation results thrown
away; duplicated: completed twice + invocations run twice; hung: workloads not ended + invocations
without an answer). Exit code 0 when lost, duplicated, overlapping and hung are all 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from controlplane.natsd import NatsServer, free_port

# Writes "start <placement> <t>", then "alive <placement> <t>" every second, then "end <placement> <t>"
# to $OUT/<workload id>: how often it ran, and whether two runs were alive at the same time.
MARKED = (
    'F="$OUT/$EDGEPLANE_WORKLOAD_ID"; P=$EDGEPLANE_PLACEMENT_ID; echo "start $P $(date +%s.%N)" >> "$F"; '
    'i=0; while [ $i -lt {s} ]; do sleep 1; echo "alive $P $(date +%s.%N)" >> "$F"; i=$((i+1)); done; '
    'echo "end $P $(date +%s.%N)" >> "$F"'
)
# The function: marks its start and end in $OUT/inv-<key>, sleeps in between, returns the key.
FUNCTION_SOURCE = """import os, time

def handle(event, context):
    path = os.path.join(os.environ["OUT"], "inv-" + event["key"])
    with open(path, "a") as out:
        out.write("start %f\\n" % time.time())
    time.sleep(event["sleep"])
    with open(path, "a") as out:
        out.write("end %f\\n" % time.time())
    return {"key": event["key"]}
"""
FUNCTION_TIMEOUT_S = 20.0
SCENARIOS = ("nats", "hub", "agent", "partition", "mixed")
FINAL = ("Succeeded", "Failed")
GAP_S = 5.0  # the least time between one hit's recovery and the next hit


class PartitionUnavailable(RuntimeError):
    """This machine cannot make a network namespace (not root, no ``ip``)."""


class NetworkNamespace:
    """A network namespace joined to the host by a veth pair: ``cut()`` takes the host end down (a
    partition: packets are dropped, nothing is reset), ``heal()`` brings it back."""

    def __init__(self, index: int) -> None:
        tag = f"epc{index % 10000}"
        self.name, self.host_if, self.ns_if = tag, f"{tag}h", f"{tag}n"
        subnet = 10 + index % 240
        self.host_ip, self.ns_ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"

    def _ip(self, *args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise PartitionUnavailable(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def create(self) -> NetworkNamespace:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise PartitionUnavailable("needs root and the ip command (iproute2)")
        self.delete()
        self._ip("netns", "add", self.name)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self._ip("link", "set", self.ns_if, "netns", self.name)
        self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ip("-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        self._ip("-n", self.name, "link", "set", self.ns_if, "up")
        self._ip("-n", self.name, "link", "set", "lo", "up")
        return self

    def cut(self) -> None:
        self._ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        self._ip("link", "set", self.host_if, "up")

    def delete(self) -> None:
        for args in (["link", "del", self.host_if], ["netns", "del", self.name]):
            subprocess.run(["ip", *args], capture_output=True, timeout=10)


class Fleet:
    """The processes of a scenario, each restartable on the same ports and data dirs."""

    def __init__(
        self,
        root: Path,
        agents: int,
        *,
        netns: NetworkNamespace | None,
        run_as: str | None,
        hubs: int = 1,
        database_url: str | None = None,
        hub_lease_s: float = 15.0,
    ) -> None:
        self.root = root
        # In the partition scenario everything meets at the veth's host address (local to this
        # machine: the others reach it over loopback, the namespaced agent over the veth).
        self.host = netns.host_ip if netns is not None else "127.0.0.1"
        self.netns = netns
        self.run_as = run_as
        self.database_url = database_url  # several hubs share it; one hub keeps its SQLite file
        self.hub_lease_s = hub_lease_s
        self.nats_port = free_port(self.host)
        self.api_ports = [free_port() for _ in range(hubs)]
        self.nats: NatsServer | None = None
        self.hubs: list[subprocess.Popen[bytes] | None] = [None] * hubs
        self.agents: dict[str, subprocess.Popen[bytes] | None] = {f"c{i + 1}": None for i in range(agents)}
        self.log = open(root / "fleet.log", "ab")

    @property
    def nats_url(self) -> str:
        return f"nats://{self.host}:{self.nats_port}"

    @property
    def apis(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.api_ports]

    def start_nats(self) -> None:
        self.nats = NatsServer(host=self.host, port=self.nats_port).start()

    def start_hub(self, index: int = 0) -> None:
        several = len(self.hubs) > 1
        replica = (
            ["--database-url", str(self.database_url), "--hub-lease-s", str(self.hub_lease_s),
             "--advertise-url", self.apis[index], "--secrets-key", str(self.root / "secrets.key")]
            if several else []
        )  # fmt: skip
        self.hubs[index] = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--nats", self.nats_url, "--port",
             str(self.api_ports[index]), "--data-dir", str(self.root / _hub_dir(index)),
             "--rate-limit", "0", "--log-level", "INFO", "--nats-connect-timeout", "60",
             "--federation", str(self.root / "federation.yaml"), *replica],
            stdout=self.log, stderr=self.log,
            env={**os.environ, "EDGEPLANE_DATABASE_URL": "" if not several else str(self.database_url)},
        )  # fmt: skip

    def start_agent(self, name: str) -> None:
        # The first agent lives in the network namespace, where there is one.
        prefix = ["ip", "netns", "exec", self.netns.name] if self.netns is not None and name == "c1" else []
        self.agents[name] = subprocess.Popen(
            [*prefix, sys.executable, "-m", "edge_agent.cli", "run", "--nats", self.nats_url, "--name", name,
             "--heartbeat-interval", "0.5", "--cpu", "2", "--memory", "2Gi", "--work-dir",
             str(self.root / "agents" / name), "--log-level", "INFO",
             "--power-supply-path", str(self.root / "no-power"),
             *(["--run-as", self.run_as] if self.run_as else [])],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip

    def kill(self, what: str) -> None:
        if what == "nats" and self.nats is not None and self.nats.process is not None:
            self.nats.process.kill()
            self.nats.process.wait()
        elif what.startswith("hub"):
            process = self.hubs[_hub_index(what)]
            if process is not None:
                process.kill()
                process.wait()
        elif what in self.agents and self.agents[what] is not None:
            process = self.agents[what]
            assert process is not None
            process.kill()
            process.wait()

    def restart(self, what: str) -> None:
        if what == "nats":
            self.start_nats()
        elif what.startswith("hub"):
            self.start_hub(_hub_index(what))
        else:
            self.start_agent(what)

    def stop(self) -> None:
        for process in [*self.agents.values(), *self.hubs]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.agents.values(), *self.hubs]:
            if process is not None:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        if self.nats is not None:
            self.nats.stop()
        self.log.close()


def _hub_dir(index: int) -> str:
    return "hub" if index == 0 else f"hub{index + 1}"


def _hub_index(what: str) -> int:
    """``hub`` is the only hub; ``hub3`` the third replica."""
    return int(what[3:]) - 1 if what[3:] else 0


class Apis:
    """The client's addresses of the API: each call goes to the next replica in turn, so a
    retry after a refused connection reaches another one (one hub: always the same)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.turn = 0

    def __call__(self, path: str) -> str:
        self.turn = (self.turn + 1) % len(self.urls)
        return self.urls[self.turn] + path


async def leads(session: aiohttp.ClientSession, url: str) -> bool:
    """Whether the hub at ``url`` says it leads (``/readyz`` 200; a standby's is 503)."""
    try:
        async with session.get(url + "/readyz", timeout=aiohttp.ClientTimeout(total=1)) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _leading_hub(session: aiohttp.ClientSession, fleet: Fleet) -> int | None:
    """The replica that leads now, or None."""
    for index, url in enumerate(fleet.apis):
        if fleet.hubs[index] is not None and await leads(session, url):
            return index
    return None


async def fresh_database(base: str, prefix: str) -> tuple[str, str]:
    """A new database on ``base``'s server: (its URL, its name)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(base)
    admin = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    name = f"{prefix}_{os.getpid()}_{int(time.time())}"
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return parsed.set(drivername="postgresql", database=name).render_as_string(hide_password=False), name


async def drop_database(base: str, name: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(base)
    admin = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _call(
    session: aiohttp.ClientSession, method: str, url: str, *, timeout_s: float = 10.0, **kwargs: Any
) -> tuple[int, Any]:
    status, body, _ = await _call_retry_after(session, method, url, timeout_s=timeout_s, **kwargs)
    return status, body


async def _call_retry_after(
    session: aiohttp.ClientSession, method: str, url: str, *, timeout_s: float = 10.0, **kwargs: Any
) -> tuple[int, Any, bool]:
    """Status, body, and whether the answer asks to be retried (``Retry-After``: a standby with no
    leader, a leader lost mid-request, the store away; the same key makes the retry safe)."""
    async with session.request(
        method, url, timeout=aiohttp.ClientTimeout(total=timeout_s), **kwargs
    ) as response:
        body = await response.json(content_type=None)
        return response.status, body, response.status == 503 and "Retry-After" in response.headers


async def _retrying(
    session: aiohttp.ClientSession, method: str, api: Apis, path: str, deadline: float, **kwargs: Any
) -> Any:
    """A call retried while the hub is down (what a client does); the body of the first 2xx."""
    while time.monotonic() < deadline:
        try:
            status, body = await _call(session, method, api(path), **kwargs)
            if status < 300:
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{method} {path}: no answer before the deadline")


@dataclass(slots=True)
class Invocation:
    """One invocation as its client saw it: the final answer, or none (hung)."""

    key: str
    mode: str  # sync | async
    outcome: str = "hung"  # ok | failed | hung
    code: str = ""
    seconds: float = 0.0


@dataclass(slots=True)
class Load:
    workloads: list[str] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)


async def _invoke_sync(session: aiohttp.ClientSession, api: Apis, invocation: Invocation, body: Any) -> None:
    """POST the invocation (retrying with its key while the hub is away or it is still running)
    until a final answer or its timeout + 10 s."""
    began = time.monotonic()
    deadline = began + FUNCTION_TIMEOUT_S + 10
    while time.monotonic() < deadline:
        try:
            status, answer, retry = await _call_retry_after(
                session, "POST", api("/v1/functions/chaos/invoke"), json=body,
                headers={"Idempotency-Key": invocation.key}, timeout_s=max(1.0, deadline - time.monotonic()),
            )  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError):
            await asyncio.sleep(0.5)
            continue
        if status == 200:
            invocation.outcome = "ok" if answer == {"key": body["key"]} else "failed"
        elif status == 409 or retry or (status >= 500 and not isinstance(answer, dict)):
            await asyncio.sleep(0.5)  # still running (a retry), the hub is starting or no hub leads
            continue
        else:
            invocation.outcome = "failed"
            error = answer.get("error") if isinstance(answer, dict) else None
            invocation.code = str(error.get("code", status)) if isinstance(error, dict) else str(status)
        break
    invocation.seconds = time.monotonic() - began


async def _invoke_async(session: aiohttp.ClientSession, api: Apis, invocation: Invocation, body: Any) -> None:
    """POST with ?async=1 (retried with its key), then poll until it ends or its timeout + 10 s."""
    began = time.monotonic()
    deadline = began + FUNCTION_TIMEOUT_S + 10
    invocation_id = ""
    while time.monotonic() < deadline and not invocation_id:
        try:
            status, answer = await _call(
                session, "POST", api("/v1/functions/chaos/invoke?async=1"), json=body,
                headers={"Idempotency-Key": invocation.key},
            )  # fmt: skip
            if status in (200, 202):
                invocation_id = answer["invocation_id"]
                break
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
            pass
        await asyncio.sleep(0.5)
    while invocation_id and time.monotonic() < deadline:
        try:
            status, answer = await _call(session, "GET", api(f"/v1/invocations/{invocation_id}"))
            if status == 200 and answer.get("status") in FINAL:
                ok = answer["status"] == "Succeeded" and answer.get("result") == {"key": body["key"]}
                invocation.outcome = "ok" if ok else "failed"
                error = answer.get("error") or {}
                invocation.code = "" if ok else str(error.get("code", answer["status"]))
                break
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
            pass
        await asyncio.sleep(0.5)
    invocation.seconds = time.monotonic() - began


def _count_workloads(markers: Path, accepted: list[str], final: dict[str, str]) -> dict[str, int]:
    completed = lost = completed_twice = overlapping = started_twice = 0
    for workload_id in accepted:
        path = markers / workload_id
        lines = [line.split() for line in (path.read_text().splitlines() if path.exists() else [])]
        starts: dict[str, float] = {}
        last: dict[str, float] = {}  # when each attempt was last seen alive
        ends = 0
        for kind, placement, stamp in (line for line in lines if len(line) == 3):
            t = float(stamp)
            if kind == "start":
                starts.setdefault(placement, t)
            last[placement] = max(last.get(placement, t), t)
            ends += kind == "end"
        completed += ends > 0
        lost += ends == 0
        completed_twice += ends > 1
        started_twice += len(starts) > 1
        # Two attempts overlap when one was still seen alive after the other had started.
        overlapping += any(starts[a] <= starts[b] < last[a] for a in starts for b in starts if a != b)
    return {
        "accepted": len(accepted), "completed": completed, "lost": lost, "completed_twice": completed_twice,
        "overlapping": overlapping, "started_twice": started_twice,
        "failed": sum(final.get(w) == "Failed" for w in accepted),
        "not_ended": sum(final.get(w) not in FINAL for w in accepted),
    }  # fmt: skip


def _count_invocations(markers: Path, invocations: list[Invocation]) -> dict[str, Any]:
    counts = dict.fromkeys(
        ("accepted", "answered", "failed", "hung", "ran_twice", "finished_but_failed", "overlapping"), 0
    )
    codes: dict[str, int] = {}
    failures: list[dict[str, Any]] = []
    slowest = 0.0
    for invocation in invocations:
        path = markers / f"inv-{invocation.key}"
        lines = [line.split() for line in (path.read_text().splitlines() if path.exists() else [])]
        marks = [(kind, float(stamp)) for kind, stamp in (line for line in lines if len(line) == 2)]
        ends = sum(kind == "end" for kind, _ in marks)
        # Two runs at once: a second start before the first end.
        depth = peak = 0
        for kind, _ in sorted(marks, key=lambda m: m[1]):
            depth += 1 if kind == "start" else -1
            peak = max(peak, depth)
        counts["accepted"] += 1
        counts["answered"] += invocation.outcome == "ok"
        counts["failed"] += invocation.outcome == "failed"
        counts["hung"] += invocation.outcome == "hung"
        counts["ran_twice"] += ends > 1
        counts["overlapping"] += peak > 1
        counts["finished_but_failed"] += invocation.outcome == "failed" and ends > 0
        if invocation.outcome == "failed":
            codes[invocation.code] = codes.get(invocation.code, 0) + 1
        if invocation.outcome in ("failed", "hung"):
            failures.append(
                {
                    "key": invocation.key,
                    "mode": invocation.mode,
                    "outcome": invocation.outcome,
                    "code": invocation.code,
                    "ran_to_end": ends,
                    "marks": [m for m, _ in sorted(marks, key=lambda m: m[1])],
                    "seconds": round(invocation.seconds, 1),
                }
            )
        slowest = max(slowest, invocation.seconds)
    return {**counts, "failure_codes": codes, "failures": failures, "slowest_answer_s": round(slowest, 1)}


def _headline(workloads: dict[str, int], invocations: dict[str, Any]) -> dict[str, int]:
    return {
        "accepted": workloads["accepted"] + invocations["accepted"],
        "completed": workloads["completed"] + invocations["answered"],
        "lost": workloads["lost"] + invocations["finished_but_failed"],
        "duplicated": workloads["completed_twice"] + invocations["ran_twice"],
        "overlapping": workloads["overlapping"] + invocations["overlapping"],
        "hung": workloads["not_ended"] + invocations["hung"],
    }


def _run_as() -> str | None:
    """``agent`` where confined function workers could not run Python (the agent's own interpreter
    unreachable to the unprivileged user and no other of its version): as the suite does."""
    from edge_agent.confinement import RunUser, worker_python

    if os.geteuid() != 0:
        return None
    return "agent" if worker_python(RunUser("nobody", 65534, 65534))[0] is None else None


async def run_scenario(name: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"edgeplane-chaos-{name}-"))
    markers = root / "markers"
    markers.mkdir()
    os.chmod(root, 0o755)
    os.chmod(markers, 0o777)  # the agents run user code as an unprivileged user
    grace = "" if args.eviction_grace is None else f"    eviction_grace_s: {args.eviction_grace}\n"
    (root / "federation.yaml").write_text(
        f"version: 1\nclusters:\n  - name: default\n    region: local\n{grace}"
    )
    netns = NetworkNamespace(os.getpid()).create() if name == "partition" else None
    database: tuple[str, str] | None = None
    if args.hubs > 1:
        from controlplane.store.secrets import load_env_cipher

        database = await fresh_database(args.database_url, "edgeplane_chaos")
        load_env_cipher(root / "secrets.key")  # the replicas share the key of env values at rest
    fleet = Fleet(
        root,
        args.agents,
        netns=netns,
        run_as=_run_as(),
        hubs=args.hubs,
        database_url=database[0] if database else None,
        hub_lease_s=args.hub_lease_s,
    )
    api = Apis(fleet.apis)
    agents = list(fleet.agents)
    targets = {
        "nats": ["nats"] * args.kills,
        "hub": ["hub"] * args.kills,
        "agent": agents * args.kills,
        "partition": ["c1"] * args.kills,
        "mixed": ["nats", "hub", *agents] * args.kills,
    }[name]
    schedule = sorted((rng.uniform(3, args.chaos_s), what) for what in targets)
    load = Load()
    final: dict[str, str] = {}
    try:
        fleet.start_nats()
        fleet.start_hub(0)
        deadline = time.monotonic() + 60
        while not (root / "hub" / "admin.token").exists():
            assert time.monotonic() < deadline, "the hub did not start"
            await asyncio.sleep(0.2)
        for index in range(1, args.hubs):  # the first leads; the others stand by
            fleet.start_hub(index)
        for agent in agents:
            fleet.start_agent(agent)
        token = (root / "hub" / "admin.token").read_text().strip()
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            await _retrying(session, "GET", api, "/healthz", time.monotonic() + 60)
            ready_by = time.monotonic() + 60
            while time.monotonic() < ready_by:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError):
                    _, nodes = await _call(session, "GET", api("/v1/nodes"))
                    if sum(n["status"] == "Ready" for n in nodes["items"]) == len(agents):
                        break
                await asyncio.sleep(0.5)
            function = {"name": "chaos", "runtime": "python", "source": FUNCTION_SOURCE,
                        "handler": "handle", "memory": "64Mi", "timeout_s": FUNCTION_TIMEOUT_S,
                        "env": {"OUT": str(markers)}}  # fmt: skip
            await _retrying(session, "POST", api, "/v1/functions", time.monotonic() + 30, json=function)
            calls: list[asyncio.Task[None]] = []

            async def submit_workloads() -> None:
                for i in range(args.workloads):
                    command = ["sh", "-c", MARKED.format(s=rng.randint(2, 6))]
                    body = {"name": f"chaos-{i}", "command": command, "env": {"OUT": str(markers)},
                            "resources": {"cpu": 0.2, "memory": "32Mi"}}  # fmt: skip
                    created = await _retrying(
                        session, "POST", api, "/v1/workloads", time.monotonic() + 120,
                        json=body, headers={"Idempotency-Key": f"chaos-{name}-{args.seed}-{i}"},
                    )  # fmt: skip
                    load.workloads.append(created["id"])
                    await asyncio.sleep(args.chaos_s / max(1, args.workloads))

            async def submit_invocations() -> None:
                for i in range(args.invocations):
                    invocation = Invocation(key=f"{name}-{args.seed}-{i}", mode="async" if i % 2 else "sync")
                    load.invocations.append(invocation)
                    body = {"key": invocation.key, "sleep": round(rng.uniform(0.2, 2.0), 2)}
                    call = _invoke_async if invocation.mode == "async" else _invoke_sync
                    calls.append(asyncio.create_task(call(session, api, invocation, body)))
                    await asyncio.sleep(args.chaos_s / max(1, args.invocations))

            async def chaos() -> None:
                began = time.monotonic()
                recovered = began
                for at, what in schedule:
                    # At its moment, but never sooner than GAP_S after the last recovery: back-to-back
                    # hits would make one outage of their sum (a 15 s partition twice is a 30 s one).
                    await asyncio.sleep(
                        max(0.0, began + at - time.monotonic(), recovered + GAP_S - time.monotonic())
                    )
                    now = time.monotonic() - began
                    if name == "partition":
                        assert netns is not None
                        outage = rng.uniform(5, 20)
                        print(f"  t={now:5.1f}s cut {what} off the network for {outage:.1f}s", flush=True)
                        netns.cut()
                        await asyncio.sleep(outage)
                        netns.heal()
                        recovered = time.monotonic()
                        continue
                    outage = rng.uniform(2, 5)
                    if what == "hub" and args.hubs > 1:  # the one leading now (any, while none does)
                        leading = await _leading_hub(session, fleet)
                        what = f"hub{(rng.randrange(args.hubs) if leading is None else leading) + 1}"
                    print(f"  t={now:5.1f}s kill -9 {what}, back in {outage:.1f}s", flush=True)
                    fleet.kill(what)
                    await asyncio.sleep(outage)
                    fleet.restart(what)
                    recovered = time.monotonic()

            await asyncio.gather(submit_workloads(), submit_invocations(), chaos())
            await asyncio.gather(*calls)
            # Everything back: wait for every workload to end (or the bound).
            deadline = time.monotonic() + args.settle_s
            while time.monotonic() < deadline:
                for workload_id in load.workloads:
                    if final.get(workload_id) in FINAL:
                        continue
                    try:
                        status, body = await _call(session, "GET", api(f"/v1/workloads/{workload_id}"))
                        if status == 200:
                            final[workload_id] = body["status"]
                    except (aiohttp.ClientError, TimeoutError, ValueError):
                        pass
                if all(final.get(w) in FINAL for w in load.workloads):
                    break
                await asyncio.sleep(1.0)
        workloads = _count_workloads(markers, load.workloads, final)
        invocations = _count_invocations(markers, load.invocations)
        return {
            **_headline(workloads, invocations),
            "workloads": workloads,
            "invocations": invocations,
            "hits": {what: targets.count(what) for what in sorted(set(targets))},
            "dir": str(root) if args.keep else None,
        }
    finally:
        fleet.stop()
        if netns is not None:
            netns.delete()
        if database is not None:
            await drop_database(args.database_url, database[1])
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    scenarios: dict[str, Any] = {}
    for name in args.scenarios:
        print(f"scenario {name}", flush=True)
        try:
            scenarios[name] = await run_scenario(name, args, rng)
        except PartitionUnavailable as exc:
            print(f"  skipped: {exc}", flush=True)
            scenarios[name] = {"skipped": str(exc)}
    ran = [s for s in scenarios.values() if "skipped" not in s]
    keys = ("accepted", "completed", "lost", "duplicated", "overlapping", "hung")
    totals = {key: sum(s[key] for s in ran) for key in keys}
    return {
        "seed": args.seed,
        "hubs": args.hubs,
        "eviction_grace_s": args.eviction_grace,
        "scenarios": scenarios,
        "totals": totals,
    }


def _table(result: dict[str, Any]) -> str:
    head = (f"{'scenario':<10} {'hits':>4} {'workloads':>9} {'done':>5} {'lost':>4} {'twice':>5} "
            f"{'overlap':>7} {'restarted':>9} {'invocations':>11} {'ok':>4} {'failed':>6} {'hung':>4} "
            f"{'ran twice':>9} {'result lost':>11}")  # fmt: skip
    rows = [head, "-" * len(head)]
    for name, s in result["scenarios"].items():
        if "skipped" in s:
            rows.append(f"{name:<10} skipped: {s['skipped']}")
            continue
        w, i = s["workloads"], s["invocations"]
        rows.append(
            f"{name:<10} {sum(s['hits'].values()):>4} {w['accepted']:>9} {w['completed']:>5} {w['lost']:>4} "
            f"{w['completed_twice']:>5} {w['overlapping']:>7} {w['started_twice']:>9} {i['accepted']:>11} "
            f"{i['answered']:>4} {i['failed']:>6} {i['hung']:>4} {i['ran_twice']:>9} "
            f"{i['finished_but_failed']:>11}"
        )
        if i["failure_codes"]:
            rows.append(f"{'':<10} invocation failures: {i['failure_codes']}")
    t = result["totals"]
    rows.append(
        f"totals: accepted {t['accepted']}, completed {t['completed']}, lost {t['lost']}, "
        f"duplicated {t['duplicated']}, overlapping {t['overlapping']}, hung {t['hung']}"
    )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--workloads", type=int, default=30, help="marker-writing workloads per scenario")
    parser.add_argument("--invocations", type=int, default=40, help="invocations per scenario (half async)")
    parser.add_argument("--kills", type=int, default=3, help="hits of each component per scenario")
    parser.add_argument(
        "--scenarios",
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=["nats", "hub", "agent", "partition"],
        help=f"comma-separated, from {', '.join(SCENARIOS)}",
    )
    parser.add_argument("--chaos-s", type=float, default=60.0, help="how long the hits go on, per scenario")
    parser.add_argument("--settle-s", type=float, default=180.0, help="how long to wait for every workload")
    parser.add_argument(
        "--eviction-grace",
        type=float,
        default=None,
        help="the cluster's eviction_grace_s (default: the cluster's, 30 s; 0: re-place at lease expiry)",
    )
    parser.add_argument("--hubs", type=int, default=1, help="hub replicas (more than 1: on PostgreSQL)")
    parser.add_argument(
        "--database-url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="with --hubs > 1: the PostgreSQL server to make each scenario's database on",
    )
    parser.add_argument(
        "--hub-lease-s", type=float, default=15.0, help="with --hubs > 1: the hubs' --hub-lease-s"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep each scenario's directory (logs, markers)")
    args = parser.parse_args()
    if args.hubs < 1:
        parser.error("--hubs: at least 1")
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"--scenarios: unknown {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    result = asyncio.run(run(args))
    grace = "the cluster default" if args.eviction_grace is None else f"{args.eviction_grace:g}s"
    hubs = (
        "1 hub (SQLite)" if args.hubs == 1 else f"{args.hubs} hubs (PostgreSQL, lease {args.hub_lease_s:g}s)"
    )
    print(f"\nchaos seed {args.seed}, {hubs}, {args.agents} agents, eviction grace {grace}")
    print(_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    totals = result["totals"]
    return 0 if totals["lost"] == totals["duplicated"] == totals["overlapping"] == totals["hung"] == 0 else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
