"""A chaos run anyone can repeat: kill -9 the hub, the nats-server and agents under load, then count.

Starts a nats-server, a hub (``controlplane serve``) and N agents (``edge-agent run``) as separate
processes on loopback, submits a bounded load of workloads that write start/end markers, and
kills each component K times at moments drawn from the seed (outages of 2-5 s). Then it waits for
every workload to end and counts, from the markers: accepted, completed, lost (never completed),
completed twice, overlapping attempts (two runs of one workload at once), and started twice.

    python bench/chaos.py --agents 3 --workloads 40 --kills 3 --seed 7 [--json out.json]

Each kill is a real SIGKILL; restarts use the same ports and data dirs (the hub and agents keep
their state on disk, as on a real node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
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


class Fleet:
    """The processes of the run, each restartable on the same ports and data dirs."""

    def __init__(self, root: Path, agents: int) -> None:
        self.root = root
        self.nats_port = free_port()
        self.api_port = free_port()
        self.nats: NatsServer | None = None
        self.hub: subprocess.Popen[bytes] | None = None
        self.agents: dict[str, subprocess.Popen[bytes] | None] = {f"c{i + 1}": None for i in range(agents)}
        self.log = open(root / "fleet.log", "ab")

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start_nats(self) -> None:
        self.nats = NatsServer(port=self.nats_port).start()

    def start_hub(self) -> None:
        self.hub = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--nats", self.nats_url, "--port",
             str(self.api_port), "--data-dir", str(self.root / "hub"), "--rate-limit", "0",
             "--log-level", "WARNING", "--nats-connect-timeout", "60",
             "--federation", str(self.root / "federation.yaml")],
            stdout=self.log, stderr=self.log, env={**os.environ, "EDGEPLANE_DATABASE_URL": ""},
        )  # fmt: skip

    def start_agent(self, name: str) -> None:
        self.agents[name] = subprocess.Popen(
            [sys.executable, "-m", "edge_agent.cli", "run", "--nats", self.nats_url, "--name", name,
             "--heartbeat-interval", "0.5", "--cpu", "2", "--memory", "2Gi", "--work-dir",
             str(self.root / "agents" / name), "--log-level", "WARNING",
             "--power-supply-path", str(self.root / "no-power")],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip

    def kill(self, what: str) -> None:
        if what == "nats" and self.nats is not None and self.nats.process is not None:
            self.nats.process.kill()
            self.nats.process.wait()
        elif what == "hub" and self.hub is not None:
            self.hub.kill()
            self.hub.wait()
        elif what in self.agents and self.agents[what] is not None:
            process = self.agents[what]
            assert process is not None
            process.kill()
            process.wait()

    def restart(self, what: str) -> None:
        if what == "nats":
            self.start_nats()
        elif what == "hub":
            self.start_hub()
        else:
            self.start_agent(what)

    def stop(self) -> None:
        for process in [*self.agents.values(), self.hub]:
            if process is not None and process.poll() is None:
                process.terminate()
        for process in [*self.agents.values(), self.hub]:
            if process is not None:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        if self.nats is not None:
            self.nats.stop()
        self.log.close()


async def _call(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=10), **kwargs) as response:
        return response.status, await response.json(content_type=None)


async def _retrying(
    session: aiohttp.ClientSession, method: str, url: str, deadline: float, **kwargs: Any
) -> Any:
    """A call retried while the hub is down (what a client does); the body of the first 2xx."""
    while time.monotonic() < deadline:
        try:
            status, body = await _call(session, method, url, **kwargs)
            if status < 300:
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{method} {url}: no answer before the deadline")


def _count(markers: Path, accepted: list[str]) -> dict[str, int]:
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
        "accepted": len(accepted), "completed": completed, "lost": lost, "duplicated": completed_twice,
        "overlapping": overlapping, "started_twice": started_twice,
    }  # fmt: skip


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="edgeplane-chaos-"))
    markers = root / "markers"
    markers.mkdir()
    os.chmod(root, 0o755)
    os.chmod(markers, 0o777)  # the agents run workloads as an unprivileged user
    (root / "federation.yaml").write_text(
        "version: 1\nclusters:\n  - name: default\n    region: local\n"
        f"    eviction_grace_s: {args.eviction_grace}\n"
    )
    fleet = Fleet(root, args.agents)
    components = ["nats", "hub", *fleet.agents]
    schedule = sorted((rng.uniform(3, args.chaos_s), what) for what in components for _ in range(args.kills))
    try:
        fleet.start_nats()
        fleet.start_hub()
        for name in fleet.agents:
            fleet.start_agent(name)
        deadline = time.monotonic() + 60
        while not (root / "hub" / "admin.token").exists():
            assert time.monotonic() < deadline, "the hub did not start"
            await asyncio.sleep(0.2)
        token = (root / "hub" / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        accepted: list[str] = []
        async with aiohttp.ClientSession(headers=headers) as session:
            await _retrying(session, "GET", fleet.api + "/healthz", time.monotonic() + 60)

            async def submit() -> None:
                for i in range(args.workloads):
                    command = ["sh", "-c", MARKED.format(s=rng.randint(2, 6))]
                    body = {"name": f"chaos-{i}", "command": command, "env": {"OUT": str(markers)},
                            "resources": {"cpu": 0.2, "memory": "32Mi"}}  # fmt: skip
                    created = await _retrying(
                        session, "POST", fleet.api + "/v1/workloads", time.monotonic() + 120,
                        json=body, headers={"Idempotency-Key": f"chaos-{args.seed}-{i}"},
                    )  # fmt: skip
                    accepted.append(created["id"])
                    await asyncio.sleep(args.chaos_s / args.workloads)

            async def chaos() -> None:
                began = time.monotonic()
                for at, what in schedule:
                    await asyncio.sleep(max(0.0, began + at - time.monotonic()))
                    outage = rng.uniform(2, 5)
                    print(
                        f"  t={time.monotonic() - began:5.1f}s kill -9 {what}, back in {outage:.1f}s",
                        flush=True,
                    )
                    fleet.kill(what)
                    await asyncio.sleep(outage)
                    fleet.restart(what)

            await asyncio.gather(submit(), chaos())
            # Everything back: wait for every workload to end (or the bound).
            deadline = time.monotonic() + args.settle_s
            final: dict[str, str] = {}
            while time.monotonic() < deadline:
                for workload_id in accepted:
                    if final.get(workload_id) in ("Succeeded", "Failed"):
                        continue
                    try:
                        status, body = await _call(session, "GET", f"{fleet.api}/v1/workloads/{workload_id}")
                        if status == 200:
                            final[workload_id] = body["status"]
                    except (aiohttp.ClientError, TimeoutError, ValueError):
                        pass
                if all(final.get(w) in ("Succeeded", "Failed") for w in accepted):
                    break
                await asyncio.sleep(1.0)
        counts = _count(markers, accepted)
        counts["not_ended"] = sum(final.get(w) not in ("Succeeded", "Failed") for w in accepted)
        counts["failed"] = sum(final.get(w) == "Failed" for w in accepted)
        return {
            "kills": {what: args.kills for what in components},
            "counts": counts,
            "seed": args.seed,
            "eviction_grace_s": args.eviction_grace,
        }
    finally:
        fleet.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--workloads", type=int, default=40)
    parser.add_argument(
        "--kills", type=int, default=3, help="kills of each component (nats, hub, every agent)"
    )
    parser.add_argument("--chaos-s", type=float, default=60.0, help="how long the kills go on")
    parser.add_argument("--settle-s", type=float, default=180.0, help="how long to wait for every workload")
    parser.add_argument(
        "--eviction-grace",
        type=float,
        default=15.0,
        help="the cluster's eviction_grace_s: how long a silent agent's work is held (0: none)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs, markers)")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    counts = result["counts"]
    print(f"\nchaos seed {args.seed}, eviction grace {args.eviction_grace:g}s: kills {result['kills']}")
    print(f"{'accepted':>9} {'completed':>9} {'lost':>5} {'completed twice':>15} {'overlapping':>11} "
          f"{'started twice':>13} {'failed':>6} {'not ended':>9}")  # fmt: skip
    print(f"{counts['accepted']:>9} {counts['completed']:>9} {counts['lost']:>5} {counts['duplicated']:>15} "
          f"{counts['overlapping']:>11} {counts['started_twice']:>13} {counts['failed']:>6} "
          f"{counts['not_ended']:>9}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if counts["lost"] == counts["duplicated"] == counts["overlapping"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
