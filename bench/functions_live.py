"""Live serverless benchmark: warm and cold invocation latency and invocations/s, through real NATS
and real agent processes on this machine, beside floors measured in the same run.

    python bench/functions_live.py [--agents 2] [--warm 300] [--cold 30] [--seconds 10] [--concurrency 8]
        [--json FILE] [--plot FILE.png] [--profile DIR]

The hub runs in a process of its own: ``controlplane up --agents A --port 0 --rate-limit 0`` (its
nats-server, the hub on a fresh SQLite data dir, A ``edge-agent`` processes); this process is only
the load generator. Cold starts are forced with ``--function-policy no-keepalive`` (every instance
goes when idle); warm calls reuse one instance under ``fixed-10m``. The throughput phase keeps
``--concurrency`` calls in flight on a function with ``max_concurrency`` equal to it.

The floors, measured first in the same run and with the same client: a bare aiohttp handler (a
process of its own) answering the same POSTs; a bare nats-py request/reply to a responder in
another process; and the bare chain, an aiohttp handler relaying each POST to that responder by
nats-py request/reply (what the hub adds to it is the hub's own cost). Each at concurrency 1 (p50)
and at ``--concurrency`` (requests/s). The table gives the hub's figures beside them and the ratio.

``--profile DIR`` records py-spy (``--gil``) profiles of the hub, one agent and its function
worker during the throughput phase (needs py-spy and ptrace rights).

The code under test is whatever ``python -m controlplane.cli`` imports: run with
``PYTHONPATH=<tree>`` to bench another tree (``bench/compare.py`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from burst import printed_url, save_report  # bench/ is this script's directory

ECHO = "def handle(event, context):\n    return event\n"
UP_LINE = re.compile(r"edgeplane is up: API (\S+)")
# Enough requests per floor for a stable p50 and rate, few enough to stay a small part of the run.
FLOOR_CALLS = 1500

# The floors' servers, each a process of its own (argv[1]: the NATS URL where one is needed). The
# HTTP ones print their port once listening; the responder prints "ready" once subscribed.
FLOOR_HTTP = textwrap.dedent(
    """
    import asyncio, json, sys
    from aiohttp import web

    async def invoke(request):
        event = await request.json()
        return web.Response(text=json.dumps(event), content_type="application/json")

    async def main():
        app = web.Application()
        app.router.add_post("/invoke", invoke)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)
FLOOR_RESPONDER = textwrap.dedent(
    """
    import asyncio, sys
    import nats

    async def main():
        nc = await nats.connect(sys.argv[1])
        async def echo(msg):
            await msg.respond(msg.data)
        await nc.subscribe("floor.echo", cb=echo)
        await nc.flush()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)
FLOOR_RELAY = textwrap.dedent(
    """
    import asyncio, sys
    import nats
    from aiohttp import web

    async def main():
        nc = await nats.connect(sys.argv[1])

        async def invoke(request):
            body = await request.read()
            reply = await nc.request("floor.echo", body, timeout=10)
            return web.Response(body=reply.data, content_type="application/json")

        app = web.Application()
        app.router.add_post("/invoke", invoke)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def call(http: aiohttp.ClientSession, base: str, name: str, event: object) -> tuple[float, bool]:
    """One synchronous invocation: its latency (ms) and whether it was a cold start."""
    started = time.perf_counter()
    async with http.post(f"{base}/v1/functions/{name}/invoke", json=event) as response:
        await response.read()
        assert response.status == 200, await response.text()
        return (time.perf_counter() - started) * 1000, response.headers["X-Edgeplane-Cold-Start"] == "true"


async def sequential(once: Callable[[], Awaitable[Any]], count: int) -> list[float]:
    """``count`` calls one after another: each one's latency (ms)."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        await once()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def loaded(
    once: Callable[[], Awaitable[Any]], concurrency: int, *, seconds: float | None = None, count: int = 0
) -> tuple[list[float], float]:
    """``concurrency`` callers in a loop, for ``seconds`` or until ``count`` calls in all: the
    latencies (ms) and the calls per second."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds if seconds is not None else float("inf")

    async def caller() -> None:
        while time.perf_counter() < deadline and (seconds is not None or len(latencies) < count):
            started = time.perf_counter()
            await once()
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies, len(latencies) / (time.perf_counter() - began)


async def _started(process: subprocess.Popen[str]) -> str:
    """The first line a floor's server prints (its port, or "ready")."""
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
    if not line:
        raise RuntimeError(f"a floor server exited {process.wait(timeout=5)} before it was ready")
    return line.strip()


def _server(script: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script, *argv], stdout=subprocess.PIPE, text=True)


def _stop(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=10)


async def floors(concurrency: int, calls: int) -> dict[str, float]:
    """p50 at concurrency 1 and requests/s at ``concurrency`` of the bare HTTP handler, the bare
    NATS request/reply and the bare chain (HTTP relayed over NATS), on a nats-server of their own."""
    import nats

    from controlplane.natsd import NatsServer

    result: dict[str, float] = {}
    event = {"x": 1}
    body = json.dumps(event).encode()
    with NatsServer() as nats_server:
        responder = _server(FLOOR_RESPONDER, nats_server.url)
        http_server = _server(FLOOR_HTTP)
        relay = _server(FLOOR_RELAY, nats_server.url)
        try:
            await _started(responder)
            http_port, relay_port = int(await _started(http_server)), int(await _started(relay))
            connector = aiohttp.TCPConnector(limit=concurrency * 2)
            async with aiohttp.ClientSession(connector=connector) as http:
                for name, port in (("http", http_port), ("chain", relay_port)):
                    url = f"http://127.0.0.1:{port}/invoke"

                    async def post(url: str = url) -> None:
                        async with http.post(url, json=event) as response:
                            await response.read()
                            assert response.status == 200

                    await sequential(post, 50)  # warm the connections and the handlers
                    result[f"{name}_p50_ms"] = pct(await sequential(post, calls // 3), 0.5)
                    server = psutil.Process((http_server if name == "http" else relay).pid)
                    cpu0 = cpu_by_role({name: [server]})[name]
                    _, result[f"{name}_per_s"] = await loaded(post, concurrency, count=calls)
                    cpu = cpu_by_role({name: [server]})[name] - cpu0
                    result[f"{name}_cpu_ms_per_request"] = 1000 * cpu / calls
            client = await nats.connect(nats_server.url)
            try:

                async def request() -> None:
                    await client.request("floor.echo", body, timeout=10)

                await sequential(request, 50)
                result["nats_p50_ms"] = pct(await sequential(request, calls // 3), 0.5)
                _, result["nats_per_s"] = await loaded(request, concurrency, count=calls)
            finally:
                await client.close()
        finally:
            _stop(responder, http_server, relay)
    return result


class Up:
    """``controlplane up`` as a process of its own: the hub, its nats-server and its agents."""

    def __init__(self, data_dir: Path, agents: int, policy: str) -> None:
        self.data_dir = data_dir
        self.agents = agents
        data_dir.mkdir(parents=True)
        self.log = data_dir.parent / f"{data_dir.name}.log"
        command = [
            sys.executable, "-m", "controlplane.cli", "up", "--agents", str(agents), "--port", "0",
            "--data-dir", str(data_dir), "--rate-limit", "0", "--log-level", "WARNING",
            "--function-policy", policy,
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.url = ""
        self.headers: dict[str, str] = {}

    async def ready(self) -> None:
        """Until the API answers and every agent is a Ready node."""
        self.url = await printed_url(self.process, self.log, UP_LINE, what="controlplane up", timeout_s=60)
        token = (self.data_dir / "admin.token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=self.headers) as http:
            for _ in range(300):
                async with http.get(f"{self.url}/v1/nodes", params={"status": "Ready"}) as r:
                    if r.status == 200 and (await r.json())["total"] == self.agents:
                        return
                await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.agents} agents were not Ready within 30 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def profile(up: Up, out_dir: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy recorders (--gil, raw collapsed stacks) on the hub, the first agent and its
    function workers, for ``seconds``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    hub = psutil.Process(up.process.pid)
    targets = {"hub": hub.pid}
    agents = [p for p in hub.children() if "edge_agent.cli" in " ".join(p.cmdline())]
    for index, agent in enumerate(agents):
        targets[f"agent{index}"] = agent.pid
        for worker_index, worker in enumerate(agent.children(recursive=True)):
            targets[f"agent{index}-worker{worker_index}"] = worker.pid
    recorders = []
    for name, pid in targets.items():
        command = [
            "py-spy", "record", "--gil", "--nonblocking", "-r", "200", "-d", str(int(seconds)),
            "-f", "raw", "-o", str(out_dir / f"{name}.txt"), "-p", str(pid),
        ]  # fmt: skip
        recorders.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return recorders


async def cold_phase(args: argparse.Namespace, tmp: Path) -> list[float]:
    up = Up(tmp / "cold", args.agents, "no-keepalive")
    try:
        await up.ready()
        async with aiohttp.ClientSession(headers=up.headers) as http:
            body = {"name": "cold", "source": ECHO, "handler": "handle"}
            await http.post(f"{up.url}/v1/functions", json=body)
            cold = []
            for i in range(args.cold):
                latency, was_cold = await call(http, up.url, "cold", {"i": i})
                if was_cold:
                    cold.append(latency)
                await asyncio.sleep(0.4)  # let the idle instance go
        return cold
    finally:
        up.stop()


def roles(up: Up) -> dict[str, list[psutil.Process]]:
    """The processes of a run by role: the hub (the ``up`` process), its agents, their function
    workers, the nats-server, and this load generator."""
    hub = psutil.Process(up.process.pid)
    found: dict[str, list[psutil.Process]] = {
        "hub": [hub], "agents": [], "workers": [], "nats": [], "load generator": [psutil.Process()]
    }  # fmt: skip
    for child in hub.children():
        command = " ".join(child.cmdline())
        if "edge_agent.cli" in command:
            found["agents"].append(child)
            found["workers"] += child.children(recursive=True)
        elif "nats-server" in command:
            found["nats"].append(child)
    return found


def cpu_by_role(processes: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each role's processes (their own, not children's)."""
    used: dict[str, float] = {}
    for role, members in processes.items():
        used[role] = 0.0
        for process in members:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            used[role] += times.user + times.system
    return used


async def warm_phase(
    args: argparse.Namespace, tmp: Path
) -> tuple[list[float], list[float], float, dict[str, float]]:
    up = Up(tmp / "warm", args.agents, "fixed-10m")
    try:
        await up.ready()
        connector = aiohttp.TCPConnector(limit=args.concurrency * 2)
        async with aiohttp.ClientSession(connector=connector, headers=up.headers) as http:
            for name, extra in (("warm", {}), ("busy", {"max_concurrency": args.concurrency})):
                body = {"name": name, "source": ECHO, "handler": "handle", **extra}
                async with http.post(f"{up.url}/v1/functions", json=body) as response:
                    assert response.status in (200, 201), await response.text()
            await call(http, up.url, "warm", 0)
            warm = []
            for i in range(args.warm):
                latency, was_cold = await call(http, up.url, "warm", {"i": i})
                if not was_cold:
                    warm.append(latency)
            await call(http, up.url, "busy", 0)

            async def busy() -> None:
                await call(http, up.url, "busy", {"x": 1})

            recorders = profile(up, Path(args.profile), args.seconds) if args.profile else []
            processes = roles(up)
            cpu0 = cpu_by_role(processes)
            tput, rate = await loaded(busy, args.concurrency, seconds=args.seconds)
            cpu = {role: used - cpu0[role] for role, used in cpu_by_role(processes).items()}
            for recorder in recorders:
                recorder.wait(timeout=60)
        cpu_ms = {role: round(1000 * used / max(1, len(tput)), 3) for role, used in cpu.items()}
        return warm, tput, rate, cpu_ms
    finally:
        up.stop()


def _over(value: float, floor: float) -> float:
    return value / floor if floor > 0 else float("nan")


def table(report: dict[str, Any]) -> str:
    """The hub's figures beside the floors, as a Markdown table (ratio: how many times the floor's
    cost the hub's is)."""
    floor, concurrency = report["floors"], report["throughput"]["concurrency"]
    warm, rate = report["warm"]["p50_ms"], report["throughput"]["invocations_per_s"]
    hub_cpu = report["cpu_ms_per_invocation"]["hub"]
    names = {"http": "bare aiohttp", "nats": "bare NATS request", "chain": "bare HTTP->NATS relay"}
    rows: list[tuple[str, str, str, str]] = []
    for kind, name in names.items():
        p50 = floor[f"{kind}_p50_ms"]
        rows.append(("", "", f"{p50:.2f} ({name})", f"{_over(warm, p50):.1f}x"))
    for kind in ("chain", "http"):
        cpu = floor[f"{kind}_cpu_ms_per_request"]
        rows.append(("", "", f"{cpu:.3f} ({names[kind]}'s CPU)", f"{_over(hub_cpu, cpu):.1f}x"))
    for kind, name in names.items():
        per_s = floor[f"{kind}_per_s"]
        rows.append(("", "", f"{per_s:.0f} ({name})", f"{_over(per_s, rate):.1f}x"))
    rows[0] = ("warm p50 (ms)", f"{warm:.2f}", *rows[0][2:])
    rows[3] = ("hub CPU ms per invocation", f"{hub_cpu:.3f}", *rows[3][2:])
    rows[5] = (f"invocations/s (c={concurrency})", f"{rate:.0f}", *rows[5][2:])
    lines = ["| metric | hub | floor | ratio |", "|---|---:|---:|---:|"]
    return "\n".join(lines + [f"| {' | '.join(row)} |" for row in rows])


def plot(report: dict[str, Any], path: str) -> None:
    """The latency distributions (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = report["samples"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.boxplot(list(samples.values()), tick_labels=list(samples), showfliers=False)
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_title("edgeplane live invocations (HTTP -> hub -> NATS -> agent)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--cold", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--floor-calls", type=int, default=FLOOR_CALLS, help=f"requests per floor (default {FLOOR_CALLS})"
    )
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plot", help="save the latency distributions to this PNG")
    parser.add_argument("--profile", help="record py-spy profiles of the throughput phase in this directory")
    args = parser.parse_args(argv)
    if min(args.agents, args.warm, args.concurrency) < 1 or args.cold < 0 or args.seconds <= 0:
        parser.error("--agents, --warm and --concurrency must be at least 1, --seconds positive")
    if args.floor_calls < 30:
        parser.error("--floor-calls must be at least 30")
    return args


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Floors, then the cold phase, then the warm and throughput phases; the report as a dict."""
    floor = await floors(args.concurrency, args.floor_calls)
    with tempfile.TemporaryDirectory(prefix="edgeplane-functions-") as tmp:
        cold = await cold_phase(args, Path(tmp)) if args.cold else []
        warm, tput, rate, cpu_ms = await warm_phase(args, Path(tmp))
    samples = {"cold": cold, "warm": warm, f"loaded (c={args.concurrency})": tput}
    report: dict[str, Any] = {
        name: {"n": len(values), "p50_ms": pct(values, 0.5), "p99_ms": pct(values, 0.99)}
        for name, values in samples.items()
    }
    report["throughput"] = {"invocations_per_s": rate, "concurrency": args.concurrency}
    # CPU ms per invocation of each process role in the throughput phase (a worker started or
    # ended within it counts only while it was alive at both ends).
    report["cpu_ms_per_invocation"] = cpu_ms
    report["floors"] = floor
    report["ratios"] = {
        "warm_p50_vs_chain": _over(report["warm"]["p50_ms"], floor["chain_p50_ms"]),
        "chain_per_s_vs_invocations_per_s": _over(floor["chain_per_s"], rate),
        "hub_cpu_vs_relay_cpu": _over(cpu_ms["hub"], floor["chain_cpu_ms_per_request"]),
    }
    report["agents"], report["cores"], report["samples"] = args.agents, os.cpu_count(), samples
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    print(f"live functions benchmark: {args.agents} agents, loopback NATS, {os.cpu_count()} cores")
    print(f"{'calls':22} {'n':>6} {'p50 ms':>9} {'p99 ms':>9}")
    for name in report["samples"]:
        row = report[name]
        print(f"{name:22} {row['n']:6d} {row['p50_ms']:9.2f} {row['p99_ms']:9.2f}")
    rate = report["throughput"]["invocations_per_s"]
    print(f"throughput: {rate:.0f} invocations/s at concurrency {args.concurrency}")
    if report["cold"]["n"]:
        print(f"cold/warm p50 ratio: {report['cold']['p50_ms'] / report['warm']['p50_ms']:.1f}x")
    print(
        "CPU ms per invocation (throughput phase): "
        + ", ".join(f"{role} {ms:.3f}" for role, ms in report["cpu_ms_per_invocation"].items())
    )
    print(table(report))
    save_report(report, json_path=args.json, plot_path=args.plot, draw=plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
