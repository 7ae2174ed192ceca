"""Measure the time from POST /v1/workloads to Running and to Succeeded on loopback, against
floors measured in the same run.

Starts a nats-server, a hub on a temporary SQLite file and N agent processes, then submits
workloads one at a time. Usage:

    python bench/lifecycle_latency.py --agents 3 --workloads 50 [--json out.json]

POST -> Running is the agent's ``started_at`` (taken once the process was started) less the
client's clock just before the POST: the API's polling period does not enter it. It is split
into stages from the workload's own times (ms precision): POST -> created (``created_at``, taken
as the hub starts storing it), created -> scheduled (the store's commit, the reconcile round's
read, scheduler and bid round; ``scheduled_at`` is taken as its write begins) and scheduled ->
started (the command to the agent, the agent's process start). POST -> Succeeded is
observed by polling every ``POLL_S``. The floors, measured on the same machine, NATS server and
load, before and after the workloads: a bare nats-py request/reply, a bare aiohttp GET, a bare
``asyncio.create_subprocess_exec("true")``; their sum is the least a POST -> Running pays (one
API request, one hub -> agent request, one process start), and the ratio to it is printed. Each
workload here comes alone, after the previous one ended, so every step of its path meets idle
processes: the *idle* floors time a request to a bare responder in another process and a spawn,
each after 50 ms of idleness, and the idle floor of the path is the GET, two such requests (the
bid round and the run command) and the spawn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from controlplane.api.auth import AuthSettings
from controlplane.federation.config import single_cluster
from controlplane.hub.service import HubSettings
from controlplane.natsd import NatsServer

try:
    from controlplane.runtime.runner import start_hub
except ImportError:  # a tree from before the composition root left hub/ (bench/compare.py runs old refs)
    from controlplane.hub.runner import start_hub  # type: ignore[no-redef]
from controlplane.store.identities import IdentityStore

# The API's per-token rate limit (50/s by default) is off: these runs measure the hub, not the limiter.
UNLIMITED = AuthSettings(rate_per_s=0)
POLL_S = 0.005
FLOOR_SAMPLES = 100  # per floor, half before the workloads, half after
IDLE_S = 0.05  # the idle spell before each step of the idle floors


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _first_answer(client: Any, subject: str, payload: bytes) -> None:
    """The first request to a responder just subscribed, retried while the server does not know
    of it yet ("no responders"), for at most a second."""
    import nats.errors

    for _ in range(20):
        try:
            await client.request(subject, payload, timeout=2)
            return
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)
    await client.request(subject, payload, timeout=2)


async def nats_floor(url: str, n: int) -> list[float]:
    """Round trips of a bare nats-py request to a responder on another connection (ms)."""
    import nats

    server, client = await nats.connect(url), await nats.connect(url)
    try:

        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        await server.subscribe("floor.echo", cb=echo)
        await server.flush()
        payload = b"x" * 256
        await _first_answer(client, "floor.echo", payload)  # warm
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await client.request("floor.echo", payload, timeout=2)
            out.append(1000 * (time.perf_counter() - t))
        return out
    finally:
        await client.close()
        await server.close()


async def aiohttp_floor(n: int) -> list[float]:
    """Round trips of a GET to a bare aiohttp handler answering JSON (ms)."""
    from aiohttp import web

    async def handler(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/"
            async with http.get(url) as r:  # warm
                await r.read()
            out = []
            for _ in range(n):
                t = time.perf_counter()
                async with http.get(url) as r:
                    await r.json()
                out.append(1000 * (time.perf_counter() - t))
            return out
    finally:
        await runner.cleanup()


async def spawn_floor(n: int) -> list[float]:
    """Starts of a bare ``true`` process from an asyncio loop, until exec returned (ms)."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        process = await asyncio.create_subprocess_exec("true", stdin=asyncio.subprocess.DEVNULL)
        out.append(1000 * (time.perf_counter() - t))
        await process.wait()
    return out


async def idle_floors(url: str, n: int) -> dict[str, list[float]]:
    """The same kinds of step after an idle spell of ``IDLE_S``, as each step of a lone workload
    meets them: a request to a responder in another process, and a spawn (ms). On a virtual
    machine whose idle CPUs sleep, a wake-up is part of every hop."""
    import nats
    from functions_live import FLOOR_RESPONDER  # a bare responder on floor.echo, its own process

    responder = subprocess.Popen(
        [sys.executable, "-c", FLOOR_RESPONDER, url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert responder.stdout is not None
        await asyncio.wait_for(asyncio.to_thread(responder.stdout.readline), 30)
        client = await nats.connect(url)
        requests, spawns = [], []
        try:
            await _first_answer(client, "floor.echo", b"x" * 256)  # warm
            for _ in range(n):
                await asyncio.sleep(IDLE_S)
                t = time.perf_counter()
                await client.request("floor.echo", b"x" * 256, timeout=2)
                requests.append(1000 * (time.perf_counter() - t))
        finally:
            await client.close()
        for _ in range(max(5, n // 4)):
            await asyncio.sleep(IDLE_S)
            spawns += await spawn_floor(1)
        return {"nats_request_idle_other_process_ms": requests, "spawn_idle_ms": spawns}
    finally:
        responder.kill()
        responder.wait()


async def floors(url: str, n: int) -> dict[str, list[float]]:
    return {
        "nats_request_ms": await nats_floor(url, n),
        "aiohttp_get_ms": await aiohttp_floor(n),
        "spawn_ms": await spawn_floor(max(5, n // 4)),
        **await idle_floors(url, n),
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--json")
    parser.add_argument(
        "--bid-deadline-ms",
        type=float,
        help="the hub's bid deadline (default: the hub's; 0: no bid rounds, to see what they cost)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, NatsServer() as nats_server:
        settings = HubSettings(
            nats_url=nats_server.url,
            federation=single_cluster(),
            reconcile_interval_s=0.5,
            **({} if args.bid_deadline_ms is None else {"bid_deadline_ms": args.bid_deadline_ms}),
        )
        hub = await start_hub(settings, database_url=f"sqlite:///{tmp}/bench.sqlite3", port=0, auth=UNLIMITED)
        admin = await IdentityStore(hub.hub.store).create_api_token("bench", ["admin"])
        agents = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "edge_agent.cli",
                    "run",
                    "--nats",
                    nats_server.url,
                    "--name",
                    f"b{i}",
                    "--work-dir",
                    f"{tmp}/b{i}",
                    "--log-level",
                    "WARNING",
                ],
            )
            for i in range(args.agents)
        ]
        to_running: list[float] = []
        to_done: list[float] = []
        stages: dict[str, list[float]] = {
            "post_to_created_ms": [],
            "created_to_scheduled_ms": [],
            "scheduled_to_started_ms": [],
        }
        floor_samples: dict[str, list[float]] = {}
        try:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {admin.token}"}) as http:
                while True:
                    async with http.get(f"{hub.url}/v1/nodes") as r:
                        if (await r.json())["total"] == args.agents:
                            break
                    await asyncio.sleep(0.1)
                floor_samples = await floors(nats_server.url, FLOOR_SAMPLES // 2)
                for i in range(args.workloads):
                    started = time.time()
                    body = {"name": f"bench-{i}", "command": ["true"]}
                    async with http.post(f"{hub.url}/v1/workloads", json=body) as r:
                        workload_id = (await r.json())["id"]
                    while True:
                        async with http.get(f"{hub.url}/v1/workloads/{workload_id}") as r:
                            workload = await r.json()
                        if workload["status"] in ("Succeeded", "Failed"):
                            break
                        await asyncio.sleep(POLL_S)
                    to_running.append(_ts(workload["started_at"]) - started)
                    to_done.append(time.time() - started)
                    created, scheduled = _ts(workload["created_at"]), _ts(workload["scheduled_at"])
                    stages["post_to_created_ms"].append(1000 * (created - started))
                    stages["created_to_scheduled_ms"].append(1000 * (scheduled - created))
                    stages["scheduled_to_started_ms"].append(1000 * (_ts(workload["started_at"]) - scheduled))
                for name, values in (await floors(nats_server.url, FLOOR_SAMPLES // 2)).items():
                    floor_samples[name] += values
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(timeout=10)
            await hub.stop()
    rows = {
        "post_to_running_ms": [1000 * v for v in to_running],
        "post_to_succeeded_observed_ms": [1000 * v for v in to_done],
        **stages,
        **{f"floor_{name}": values for name, values in floor_samples.items()},
    }
    print(f"{args.workloads} workloads, {args.agents} agents, loopback, SQLite, load {_load()}")
    print(f"{'metric':32} {'p50':>8} {'p99':>8} {'mean':>8}")
    summary: dict[str, Any] = {}
    for name, values in rows.items():
        summary[name] = {"p50": _pct(values, 0.5), "p99": _pct(values, 0.99), "mean": statistics.mean(values)}
        print(
            f"{name:32} {summary[name]['p50']:8.1f} {summary[name]['p99']:8.1f} {summary[name]['mean']:8.1f}"
        )
    floor = sum(summary[f"floor_{name}"]["p50"] for name in ("nats_request_ms", "aiohttp_get_ms", "spawn_ms"))
    summary["floor_post_to_running_ms"] = floor
    summary["post_to_running_over_floor"] = summary["post_to_running_ms"]["p50"] / floor
    # The path's own hops after idle spells: the API call, the bid round and the run command (two
    # requests to agents), the agent's spawn; the hub's two commits wake its commit thread besides.
    idle = (
        summary["floor_aiohttp_get_ms"]["p50"]
        + 2 * summary["floor_nats_request_idle_other_process_ms"]["p50"]
        + summary["floor_spawn_idle_ms"]["p50"]
    )
    summary["floor_idle_post_to_running_ms"] = idle
    summary["post_to_running_over_idle_floor"] = summary["post_to_running_ms"]["p50"] / idle
    print(
        f"floor (aiohttp GET + NATS request + spawn, p50s) {floor:.1f} ms; "
        f"POST -> Running p50 is {summary['post_to_running_over_floor']:.1f}x it "
        f"(Succeeded observed every {1000 * POLL_S:.0f} ms)"
    )
    print(
        f"floor after {1000 * IDLE_S:.0f} ms idle spells (aiohttp GET + 2 NATS requests to another "
        f"process + spawn, p50s) {idle:.1f} ms; POST -> Running p50 is "
        f"{summary['post_to_running_over_idle_floor']:.1f}x it"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
