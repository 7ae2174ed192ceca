"""Leader failover with several hubs on one PostgreSQL store, under load, on real processes.

Each scenario makes a fresh PostgreSQL database, starts a nats-server, three hubs (``controlplane
serve``, each with its own API port, all on that database: the first leads, the others stand by
and forward the API to it) and N agents, then drives a steady load through all three replicas in
turn (marker-writing workloads and function invocations, half asynchronous, each with an
``Idempotency-Key``; a client that cannot connect to one replica tries the next, as a client
given several addresses does) while it hits the leader once:

- ``kill``: ``kill -9`` the leading hub;
- ``stall``: ``SIGSTOP`` the leading hub for the lease and 10 s more, then ``SIGCONT`` (it must
  find that it no longer leads, write nothing and stop).

It measures the time from the hit until another replica's ``/readyz`` says it leads
(``new_leader_s``), every API answer the load got from the replicas that were up (``api_errors``:
5xx other than a 503 with ``Retry-After``; ``api_unavailable``: those 503s, the documented answer
while no leader exists; ``refused``: connections the hit replica refused or dropped, which the
client took elsewhere), and, from the markers the work wrote (``bench/chaos.py``'s counting),
what was lost, what ran twice and what overlapped.

    python bench/failover.py [--agents 2] [--scenarios kill,stall] [--hub-lease-s 15] [--json F]

writes ``{"failovers": [{"kind", "new_leader_s", "api_errors", "api_unavailable", "refused",
"lost", "duplicated", "overlapping", "hung", ...}]}``. The floor printed beside ``new_leader_s``
is the configured lease (a stalled leader cannot be replaced sooner) and, for a kill, the
standby's lock poll (1 s). Not measured here: cutting a site's leaf connection (the topology test
in ``tests/functional/test_nats_topology.py`` covers a site's reach, not a failover).
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
)

from controlplane.natsd import NatsServer, free_port

SCENARIOS = ("kill", "stall")
HUBS = 3


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


class Fleet:
    def __init__(
        self, root: Path, database_url: str, agents: int, lease_s: float, run_as: str | None
    ) -> None:
        self.root = root
        self.database_url = database_url
        self.lease_s = lease_s
        self.run_as = run_as
        self.nats_port = free_port()
        self.ports = [free_port() for _ in range(HUBS)]
        self.hubs: list[subprocess.Popen[bytes] | None] = [None] * HUBS
        self.agents = [f"f{i + 1}" for i in range(agents)]
        self.agent_procs: list[subprocess.Popen[bytes]] = []
        self.nats: NatsServer | None = None
        self.log = open(root / "fleet.log", "ab")

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self) -> None:
        from controlplane.store.secrets import load_env_cipher

        # Replicas share one key for the env values sealed at rest (docs/operations.md).
        load_env_cipher(self.root / "secrets.key")
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
                        "--nats",
                        self.nats_url,
                        "--name",
                        name,
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
             "--log-level", "INFO", "--nats-connect-timeout", "60"],
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
        self.log.close()


def with_cont(process: subprocess.Popen[bytes]) -> None:
    """A stopped process cannot die of SIGTERM: wake it first."""
    try:
        os.kill(process.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


async def _ready(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url + "/readyz", timeout=aiohttp.ClientTimeout(total=1)) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _leader(session: aiohttp.ClientSession, fleet: Fleet, skip: int | None = None) -> int | None:
    for i in range(HUBS):
        if i != skip and fleet.hubs[i] is not None and await _ready(session, fleet.url(i)):
            return i
    return None


async def _fresh_database(base: str) -> tuple[str, str]:
    """A new database on ``base``'s server: (its URL, its name)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(base)
    admin = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    name = f"edgeplane_failover_{os.getpid()}_{int(time.time())}"
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return parsed.set(drivername="postgresql", database=name).render_as_string(hide_password=False), name


async def _drop_database(base: str, name: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    parsed = make_url(base)
    admin = await asyncpg.connect(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run_scenario(kind: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"edgeplane-failover-{kind}-"))
    markers = root / "markers"
    markers.mkdir()
    os.chmod(root, 0o755)
    os.chmod(markers, 0o777)  # the agents run user code as an unprivileged user
    url, name = await _fresh_database(args.database_url)
    fleet = Fleet(root, url, args.agents, args.hub_lease_s, _run_as())
    workloads: list[str] = []
    invocations: list[Invocation] = []
    final: dict[str, str] = {}
    result: dict[str, Any] = {"kind": kind}
    try:
        fleet.start()
        token = (root / "h1" / "admin.token").read_text().strip()
        replicas = Replicas([fleet.url(i) for i in range(HUBS)])
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                up = [await _ready(session, fleet.url(0))]
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

            async def hit() -> None:
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
        return result
    finally:
        fleet.stop()
        await _drop_database(args.database_url, name)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _table(failovers: list[dict[str, Any]], lease_s: float) -> str:
    head = (f"{'kind':<6} {'new leader s':>12} {'floor s':>7} {'api 5xx':>7} {'503+RA':>6} {'refused':>7} "
            f"{'accepted':>8} {'lost':>4} {'twice':>5} {'overlap':>7} {'hung':>4}")  # fmt: skip
    rows = [head, "-" * len(head)]
    for f in failovers:
        floor = 1.0 if f["kind"] == "kill" else lease_s
        rows.append(
            f"{f['kind']:<6} {f['new_leader_s']!s:>12} {floor:>7.1f} {f['api_errors']:>7} "
            f"{f['api_unavailable']:>6} {f['refused']:>7} {f['accepted']:>8} {f['lost']:>4} "
            f"{f['duplicated']:>5} {f['overlapping']:>7} {f['hung']:>4}"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument(
        "--scenarios", default="kill,stall", help=f"comma-separated, from {', '.join(SCENARIOS)}"
    )
    parser.add_argument("--workloads", type=int, default=30, help="marker-writing workloads per scenario")
    parser.add_argument("--invocations", type=int, default=30, help="invocations per scenario (half async)")
    parser.add_argument("--load-s", type=float, default=45.0, help="how long the load goes on")
    parser.add_argument("--settle-s", type=float, default=120.0, help="how long to wait for every workload")
    parser.add_argument("--hub-lease-s", type=float, default=15.0, help="the hubs' --hub-lease-s")
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
