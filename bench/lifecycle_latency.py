"""Measure the time from POST /v1/workloads to Running and to Succeeded on loopback.

Starts a nats-server, a hub on a temporary SQLite file and N agent processes, then submits
workloads one at a time and polls the API. Usage:

    python bench/lifecycle_latency.py --agents 3 --workloads 50 [--json out.json]
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

import aiohttp

from controlplane.api.auth import AuthSettings
from controlplane.federation.config import single_cluster
from controlplane.hub.runner import start_hub
from controlplane.hub.service import HubSettings
from controlplane.natsd import NatsServer
from controlplane.store.identities import IdentityStore

# The API's per-token rate limit (50/s by default) is off: these runs measure the hub, not the limiter.
UNLIMITED = AuthSettings(rate_per_s=0)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, NatsServer() as nats_server:
        settings = HubSettings(
            nats_url=nats_server.url, federation=single_cluster(), reconcile_interval_s=0.5
        )
        hub = await start_hub(
            settings, database_url=f"sqlite+aiosqlite:///{tmp}/bench.sqlite3", port=0, auth=UNLIMITED
        )
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
        try:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {admin.token}"}) as http:
                while True:
                    async with http.get(f"{hub.url}/v1/nodes") as r:
                        if (await r.json())["total"] == args.agents:
                            break
                    await asyncio.sleep(0.1)
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
                        await asyncio.sleep(0.005)
                    to_running.append(_ts(workload["started_at"]) - started)
                    to_done.append(time.time() - started)
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(timeout=10)
            await hub.stop()
    rows = {
        "post_to_running_ms": [1000 * v for v in to_running],
        "post_to_succeeded_observed_ms": [1000 * v for v in to_done],
    }
    print(f"{args.workloads} workloads, {args.agents} agents, loopback, SQLite")
    print(f"{'metric':32} {'p50':>8} {'p99':>8} {'mean':>8}")
    summary = {}
    for name, values in rows.items():
        summary[name] = {"p50": _pct(values, 0.5), "p99": _pct(values, 0.99), "mean": statistics.mean(values)}
        print(
            f"{name:32} {summary[name]['p50']:8.1f} {summary[name]['p99']:8.1f} {summary[name]['mean']:8.1f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
