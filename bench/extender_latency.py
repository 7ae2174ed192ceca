"""Latency of the Kubernetes scheduler extender over real HTTP on loopback (a command, not a test).

Starts the extender's listener over a ``Scheduler("edgeplane")`` holding ``--nodes`` edge nodes
(a quarter on battery, one in eight with a MIG-enabled A100, a third of their CPUs reserved),
then posts kube-scheduler's payload (tests/fixtures/kube_extender: a Pod with containers'
requests) ``--requests`` times per verb and node-list form, over one keep-alive connection as
kube-scheduler does, and prints p50/p99/max of the round trip in milliseconds:

    python bench/extender_latency.py --nodes 100,1000 --requests 300
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from controlplane.extender.app import start_extender
from controlplane.extender.settings import ExtenderSettings
from controlplane.scheduling.model import Assignment, GpuDevice, NodeState
from controlplane.scheduling.scheduler import Scheduler

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kube_extender"
GiB = 2**30


def fleet(nodes: int) -> Scheduler:
    sched = Scheduler("edgeplane")
    for k in range(nodes):
        battery = k % 4 == 1
        sched.upsert_node(
            NodeState(
                name=f"edge-{k:04d}",
                cpu=8,
                memory=32 * GiB,
                gpus=[GpuDevice(0, mig_enabled=True)] if k % 8 == 0 else [],
                node_type="gpu" if k % 8 == 0 else "edge",
                power_source="battery" if battery else "mains",
                battery_percent=20.0 + k % 70 if battery else None,
            )
        )
        if k % 3 == 0:
            sched.reserve_existing(f"w{k}", 0, f"edge-{k:04d}", Assignment(cpu=3.0, memory=4 * GiB))
    return sched


def payloads(nodes: int) -> dict[str, dict[str, Any]]:
    names = json.loads((FIXTURES / "filter_node_names.json").read_text())
    listed = json.loads((FIXTURES / "filter_node_list.json").read_text())
    template = listed["Nodes"]["items"][0]
    items = []
    for k in range(nodes):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = f"edge-{k:04d}"
        del node["metadata"]["labels"]["edgeplane.io/node"]
        items.append(node)
    node_names = [f"edge-{k:04d}" for k in range(nodes)]
    return {
        "NodeNames": {**names, "NodeNames": node_names},
        "Nodes": {**listed, "Nodes": {"metadata": {}, "items": items}},
    }


async def measure(nodes: int, requests: int) -> list[tuple[str, str, int, np.ndarray]]:
    extender = await start_extender(ExtenderSettings("127.0.0.1", 0), fleet(nodes))
    rows = []
    try:
        async with aiohttp.ClientSession() as session:
            for form, payload in payloads(nodes).items():
                body = json.dumps(payload).encode()
                for verb in ("filter", "prioritize"):
                    times = []
                    for i in range(requests + 10):
                        start = time.perf_counter()
                        async with session.post(f"{extender.url}/{verb}", data=body) as response:
                            assert response.status == 200, await response.text()
                            await response.read()
                        if i >= 10:  # warm-up
                            times.append((time.perf_counter() - start) * 1000)
                    rows.append((form, verb, len(body), np.array(times)))
    finally:
        await extender.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="100,1000", help="comma-separated fleet sizes")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per verb and form")
    args = parser.parse_args()
    print(f"{'nodes':>6} {'form':>9} {'verb':>10} {'body KiB':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for form, verb, size, ms in asyncio.run(measure(nodes, args.requests)):
            p50, p99, top = np.percentile(ms, [50, 99, 100])
            print(f"{nodes:>6} {form:>9} {verb:>10} {size / 1024:>9.1f} {p50:>8.2f} {p99:>8.2f} {top:>8.2f}")


if __name__ == "__main__":
    main()
