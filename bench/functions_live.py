"""Live serverless benchmark: warm and cold invocation latency and invocations/s, through real NATS
and real agent processes on this machine.

    python bench/functions_live.py [--agents 2] [--warm 300] [--cold 30] [--seconds 10] [--concurrency 8]
        [--json FILE] [--plot FILE.png]

Cold starts are forced with the ``no-keepalive`` policy (every instance goes when idle); warm
calls reuse one instance under ``fixed-10m``. The throughput phase keeps ``--concurrency`` calls in
flight on a function with ``max_concurrency`` equal to it. Prints a table; with ``--plot`` saves
the latency distributions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from controlplane.api.auth import AuthSettings
from controlplane.federation.config import single_cluster
from controlplane.hub.runner import RunningHub, start_hub
from controlplane.hub.service import HubSettings
from controlplane.natsd import NatsServer
from controlplane.serverless.keepalive import make_policy
from controlplane.store.identities import IdentityStore

# Bearer headers per hub URL (each hub run has its own store and admin token).
AUTH: dict[str, dict[str, str]] = {}

ECHO = "def handle(event, context):\n    return event\n"

# The API's per-token rate limit (50/s by default) is off: these runs measure the hub, not the limiter.
UNLIMITED = AuthSettings(rate_per_s=0)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def call(http: aiohttp.ClientSession, base: str, name: str, event: object) -> tuple[float, bool, dict]:
    started = time.perf_counter()
    async with http.post(f"{base}/v1/functions/{name}/invoke", json=event) as response:
        await response.read()
        assert response.status == 200, await response.text()
        return (
            (time.perf_counter() - started) * 1000,
            response.headers["X-Edgeplane-Cold-Start"] == "true",
            dict(response.headers),
        )


async def hub_with_agents(
    tmp: str, nats_url: str, agents: int, policy: str, tag: str
) -> tuple[RunningHub, list]:
    keepalive = make_policy(policy)
    settings = HubSettings(nats_url=nats_url, federation=single_cluster(), function_policy=keepalive)
    hub = await start_hub(
        settings, database_url=f"sqlite+aiosqlite:///{tmp}/{tag}.sqlite3", port=0, auth=UNLIMITED
    )
    admin = await IdentityStore(hub.hub.store).create_api_token("bench", ["admin"])
    AUTH[hub.url] = {"Authorization": f"Bearer {admin.token}"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_agent.cli",
                "run",
                "--nats",
                nats_url,
                "--name",
                f"{tag}{i}",
                "--work-dir",
                f"{tmp}/{tag}{i}",
                "--log-level",
                "WARNING",
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for i in range(agents)
    ]
    async with aiohttp.ClientSession(headers=AUTH[hub.url]) as http:
        for _ in range(200):
            async with http.get(f"{hub.url}/v1/nodes?status=Ready") as r:
                if (await r.json())["total"] == agents:
                    break
            await asyncio.sleep(0.1)
    return hub, procs


async def stop(hub: RunningHub, procs: list) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=15)
    await hub.stop()


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--cold", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, NatsServer() as nats_server:
        # Cold: every call starts a new worker process.
        hub, procs = await hub_with_agents(tmp, nats_server.url, args.agents, "no-keepalive", "c")
        try:
            async with aiohttp.ClientSession(headers=AUTH[hub.url]) as http:
                await http.post(
                    f"{hub.url}/v1/functions", json={"name": "cold", "source": ECHO, "handler": "handle"}
                )
                cold = []
                for i in range(args.cold):
                    latency, was_cold, _ = await call(http, hub.url, "cold", {"i": i})
                    if was_cold:
                        cold.append(latency)
                    await asyncio.sleep(0.4)  # let the idle instance go
        finally:
            await stop(hub, procs)
        # Warm and throughput: instances stay.
        hub, procs = await hub_with_agents(tmp, nats_server.url, args.agents, "fixed-10m", "w")
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=args.concurrency * 2), headers=AUTH[hub.url]
            ) as http:
                await http.post(
                    f"{hub.url}/v1/functions", json={"name": "warm", "source": ECHO, "handler": "handle"}
                )
                await http.post(
                    f"{hub.url}/v1/functions",
                    json={
                        "name": "busy",
                        "source": ECHO,
                        "handler": "handle",
                        "max_concurrency": args.concurrency,
                    },
                )
                await call(http, hub.url, "warm", 0)
                warm = []
                for i in range(args.warm):
                    latency, was_cold, _ = await call(http, hub.url, "warm", {"i": i})
                    if not was_cold:
                        warm.append(latency)
                await call(http, hub.url, "busy", 0)
                done = 0
                deadline = time.perf_counter() + args.seconds
                tput: list[float] = []

                async def worker() -> None:
                    nonlocal done
                    while time.perf_counter() < deadline:
                        latency, _, _ = await call(http, hub.url, "busy", {"x": 1})
                        tput.append(latency)
                        done += 1

                began = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
                elapsed = time.perf_counter() - began
        finally:
            await stop(hub, procs)
    samples = {"cold": cold, "warm": warm, f"loaded (c={args.concurrency})": tput}
    print(f"live functions benchmark: {args.agents} agents, loopback NATS, {os.cpu_count()} cores")
    print(f"{'calls':22} {'n':>6} {'p50 ms':>9} {'p99 ms':>9}")
    for name, values in samples.items():
        results[name] = {"n": len(values), "p50_ms": pct(values, 0.5), "p99_ms": pct(values, 0.99)}
        print(f"{name:22} {len(values):6d} {pct(values, 0.5):9.2f} {pct(values, 0.99):9.2f}")
    rate = done / elapsed
    results["throughput"] = {"invocations_per_s": rate, "concurrency": args.concurrency}
    print(f"throughput: {rate:.0f} invocations/s at concurrency {args.concurrency}")
    print(f"cold/warm p50 ratio: {pct(cold, 0.5) / pct(warm, 0.5):.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("--plot needs matplotlib: pip install 'edgeplane[plot]'", file=sys.stderr)
            return 2
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.boxplot(list(samples.values()), tick_labels=list(samples), showfliers=False)
        ax.set_yscale("log")
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title("edgeplane live invocations (HTTP -> hub -> NATS -> agent)")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
