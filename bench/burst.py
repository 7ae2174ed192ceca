"""Burst bench: N workloads POSTed at concurrency C to ``controlplane up``, until all terminal,
beside floors measured in the same run on this machine.

    python bench/burst.py --workloads 500 --concurrency 16 [--agents 3] [--json F] [--plot F.png]

Starts ``controlplane up --agents A --port 0 --rate-limit 0`` as a real process (its nats-server,
the hub on a fresh SQLite data dir, A ``edge-agent`` processes), waits for the nodes to be Ready,
POSTs ``{"command": ["true"], "resources": {"cpu": 0.1, "memory": "16Mi"}}`` workloads and polls
the per-status totals of ``GET /v1/workloads`` until every accepted one is terminal. The hub runs
inside the ``up`` process; its own CPU time (children excluded: the agents and the nats-server
are child processes) is the hub's; the agents' and the nats-server's are given apart.

Report lag: per Succeeded workload, how long after its replica ended on the agent (the placement's
``finished_at``, the agent's clock) the hub applied the report (the workload's ``finished_at``,
set when the hub worked out its new status). Both clocks are this machine's. Read once all are
terminal, outside the measured CPU.

The floors, measured first in the same run: a bare aiohttp handler answering the same POSTs at the
same concurrency (in a process of its own, its CPU time measured the same way) and a bare SQLite
insert of a workload-sized row through aiosqlite + SQLAlchemy, one commit per row. The table gives
the hub's per-workload cost beside them and the ratio.

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
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil

TERMINAL = ("Succeeded", "Failed", "Cancelled")
UP_LINE = re.compile(r"edgeplane is up: API (\S+)")
BODY_RESOURCES = {"cpu": 0.1, "memory": "16Mi"}
FLOOR_MIN = 500
DRAIN_POLL_S = 0.25  # how often the totals are read while the burst drains

# The floor's HTTP server: one handler that decodes the body and answers 201 with a small JSON.
FLOOR_SERVER = textwrap.dedent(
    """
    import asyncio, sys
    from aiohttp import web

    async def create(request):
        body = await request.json()
        return web.json_response({"id": "w-0", "name": body.get("name")}, status=201)

    async def main():
        app = web.Application()
        app.router.add_post("/v1/workloads", create)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def workload_body(index: int) -> dict[str, Any]:
    """The body of the ``index``-th POST: a ``true`` that ends at once, with a small request."""
    return {"name": f"burst-{index}", "command": ["true"], "resources": dict(BODY_RESOURCES)}


def own_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process itself (not of its children)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def children_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of the process's live descendants, by role: ``agents`` and ``nats``."""
    spent = {"agents": 0.0, "nats": 0.0}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            times, command = child.cpu_times(), " ".join(child.cmdline())
        except psutil.Error:  # ended meanwhile
            continue
        spent["nats" if "nats-server" in command else "agents"] += times.user + times.system
    return spent


def parse_ts(text: str | None) -> float | None:
    """An API timestamp (ISO 8601, ``Z``) as seconds since the epoch."""
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile of ``values`` (nearest rank); NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def report_lags(http: aiohttp.ClientSession, api: str) -> list[float]:
    """Per Succeeded workload: the workload's ``finished_at`` (the hub applied the final report)
    minus its last placement's ``finished_at`` (the agent saw the process end), in seconds."""
    lags: list[float] = []
    offset = 0
    while True:
        params = {"status": "Succeeded", "limit": "1000", "offset": str(offset)}
        async with http.get(f"{api}/v1/workloads", params=params) as response:
            response.raise_for_status()
            page = await response.json()
        for item in page["items"]:
            applied = parse_ts(item["finished_at"])
            ended = [parse_ts(p["finished_at"]) for p in item["placements"] if p["status"] == "Succeeded"]
            ended_at = max((e for e in ended if e is not None), default=None)
            if applied is not None and ended_at is not None:
                lags.append(max(0.0, applied - ended_at))
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            return lags


async def post_all(
    http: aiohttp.ClientSession, url: str, count: int, concurrency: int
) -> tuple[int, dict[int, int]]:
    """POST ``count`` workload bodies to ``url`` with ``concurrency`` in flight; returns (accepted,
    {status: count} of the others). A connection error counts as status 0."""
    queue = iter(range(count))
    accepted = 0
    refused: dict[int, int] = {}

    async def worker() -> None:
        nonlocal accepted
        for index in queue:
            try:
                async with http.post(url, json=workload_body(index)) as response:
                    await response.read()
                    status = response.status
            except (TimeoutError, aiohttp.ClientError):
                status = 0
            if status in (200, 201):
                accepted += 1
            else:
                refused[status] = refused.get(status, 0) + 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return accepted, refused


async def http_floor(count: int, concurrency: int, workloads: int) -> dict[str, float]:
    """``count`` of the same POSTs against a bare aiohttp handler in a process of its own; its
    wall time is given for ``workloads`` POSTs."""
    server = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(await asyncio.wait_for(asyncio.to_thread(server.stdout.readline), 30))
        url = f"http://127.0.0.1:{port}/v1/workloads"
        connector = aiohttp.TCPConnector(limit=concurrency * 2)
        async with aiohttp.ClientSession(connector=connector) as http:
            await post_all(http, url, 1, 1)  # warm the connection and the handler
            cpu0, began = own_cpu_s(server.pid), time.perf_counter()
            accepted, _ = await post_all(http, url, count, concurrency)
            wall, cpu = time.perf_counter() - began, own_cpu_s(server.pid) - cpu0
        assert accepted == count, f"the floor server answered {accepted} of {count}"
        return {
            "http_requests": count,
            # Scaled to the burst's size, to stand beside the hub's time to accept it.
            "http_post_wall_s": wall * workloads / count,
            "http_cpu_ms_per_request": 1000 * cpu / count,
            "http_requests_per_s": count / wall,
        }
    finally:
        server.terminate()
        server.wait(timeout=10)


async def sqlite_floor(tmp: Path, count: int) -> dict[str, float]:
    """``count`` workload-sized rows inserted through aiosqlite + SQLAlchemy, one commit each, with
    the hub's pragmas (WAL). CPU time is this process's (the aiosqlite thread included)."""
    from sqlalchemy import Column, MetaData, String, Table, Text, event, insert
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp}/floor.sqlite3")

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    table = Table(
        "workloads",
        MetaData(),
        Column("id", String(64), primary_key=True),
        Column("name", String(255)),
        Column("status", String(32)),
        Column("spec", Text),
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.create_all)
        statement = insert(table)
        rows = [
            {
                "id": f"w-{i:08d}",
                "name": f"burst-{i}",
                "status": "Pending",
                "spec": json.dumps(workload_body(i)),
            }
            for i in range(count)
        ]
        cpu0, began = time.process_time(), time.perf_counter()
        for row in rows:
            async with engine.begin() as conn:
                await conn.execute(statement, row)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu0
    finally:
        await engine.dispose()
    return {"sqlite_insert_ms_per_row": 1000 * wall / count, "sqlite_cpu_ms_per_row": 1000 * cpu / count}


async def wait_until(
    what: str, check: Callable[[], Awaitable[bool]], timeout_s: float, *, every_s: float = 0.1
) -> None:
    """Poll ``check`` every ``every_s`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(every_s)


def start_up(data_dir: Path, agents: int, log: Path) -> subprocess.Popen[bytes]:
    """``controlplane up`` as a process of its own, output to ``log``."""
    command = [
        sys.executable, "-m", "controlplane.cli", "up", "--agents", str(agents), "--port", "0",
        "--data-dir", str(data_dir), "--rate-limit", "0", "--log-level", "WARNING",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


async def printed_url(
    process: subprocess.Popen[bytes], log: Path, line: re.Pattern[str], *, what: str, timeout_s: float
) -> str:
    """The URL a ``controlplane`` process (``what``: its command) prints in ``log`` once it is up
    (``line``'s first group); fails with its log's tail if it exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = line.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{what} did not print its API URL in {timeout_s:.0f} s")


async def api_of(up: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    """The API URL ``up`` prints once it is up."""
    return await printed_url(up, log, UP_LINE, what="controlplane up", timeout_s=timeout_s)


async def count_status(http: aiohttp.ClientSession, api: str, status: str) -> int:
    async with http.get(f"{api}/v1/workloads", params={"status": status, "limit": "1"}) as response:
        response.raise_for_status()
        return int((await response.json())["total"])


async def burst(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The run against ``controlplane up``: accepted, drained, hub CPU."""
    log = tmp / "up.log"
    up = start_up(tmp / "data", args.agents, log)
    try:
        api = await api_of(up, log, 60)
        token = (tmp / "data" / "admin.token").read_text().strip()
        connector = aiohttp.TCPConnector(limit=args.concurrency * 2)
        headers = {"Authorization": f"Bearer {token}"}
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout) as http:

            async def ready() -> bool:
                async with http.get(f"{api}/v1/nodes", params={"status": "Ready"}) as r:
                    return r.status == 200 and (await r.json())["total"] == args.agents

            await wait_until(f"{args.agents} Ready nodes", ready, 90)
            cpu0, began = own_cpu_s(up.pid), time.perf_counter()
            children0 = children_cpu_s(up.pid)
            accepted, refused = await post_all(http, f"{api}/v1/workloads", args.workloads, args.concurrency)
            accepted_s = time.perf_counter() - began
            counts: dict[str, int] = {}

            async def drained() -> bool:
                for status in TERMINAL:
                    counts[status] = await count_status(http, api, status)
                return sum(counts.values()) >= accepted

            # Each poll is three requests the hub answers inside the measured CPU: not too often.
            await wait_until(f"{accepted} terminal workloads", drained, args.timeout, every_s=DRAIN_POLL_S)
            drained_s = time.perf_counter() - began
            hub_cpu = own_cpu_s(up.pid) - cpu0
            children = {k: v - children0[k] for k, v in children_cpu_s(up.pid).items()}
            lags = await report_lags(http, api)
    finally:
        up.terminate()
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(timeout=10)
    return {
        "accepted": accepted,
        "refused": {str(k): v for k, v in refused.items()},
        "terminal": counts,
        "accepted_s": accepted_s,
        "drained_s": drained_s,
        "drained_per_s": accepted / drained_s,
        "hub_cpu_s": hub_cpu,
        "hub_cpu_ms_per_workload": 1000 * hub_cpu / max(1, accepted),
        "agents_cpu_ms_per_workload": 1000 * children["agents"] / max(1, accepted),
        "nats_cpu_ms_per_workload": 1000 * children["nats"] / max(1, accepted),
        "report_lag_p50_ms": 1000 * percentile(lags, 0.5),
        "report_lag_p99_ms": 1000 * percentile(lags, 0.99),
        "report_lag_max_ms": 1000 * max(lags, default=float("nan")),
    }


def _over(value: float, floor: float) -> float:
    return value / floor if floor > 0 else float("nan")


def ratios(result: dict[str, Any], floors: dict[str, float]) -> dict[str, float]:
    """The hub's per-workload cost over each floor's per-request cost."""
    return {
        "accepted_vs_http_post": _over(result["accepted_s"], floors["http_post_wall_s"]),
        "hub_cpu_vs_http_cpu": _over(result["hub_cpu_ms_per_workload"], floors["http_cpu_ms_per_request"]),
        "hub_cpu_vs_sqlite_insert_cpu": _over(
            result["hub_cpu_ms_per_workload"], floors["sqlite_cpu_ms_per_row"]
        ),
    }


def table(report: dict[str, Any]) -> str:
    """The run as a Markdown table: each figure, its floor where there is one, and the ratio."""
    floors, ratio = report["floors"], report["ratios"]
    http_wall = f"{floors['http_post_wall_s']:.3f} (bare aiohttp)"
    http_cpu = f"{floors['http_cpu_ms_per_request']:.3f} (bare aiohttp CPU/request)"
    sqlite_cpu = f"{floors['sqlite_cpu_ms_per_row']:.3f} (SQLite insert CPU/row)"
    rows = [
        ("POSTs accepted (s)", f"{report['accepted_s']:.2f}", http_wall,
         f"{ratio['accepted_vs_http_post']:.1f}x"),
        ("all terminal (s)", f"{report['drained_s']:.2f}", "", ""),
        ("drained workloads/s", f"{report['drained_per_s']:.1f}", "", ""),
        ("hub CPU (s)", f"{report['hub_cpu_s']:.2f}", "", ""),
        ("hub CPU per workload (ms)", f"{report['hub_cpu_ms_per_workload']:.2f}", http_cpu,
         f"{ratio['hub_cpu_vs_http_cpu']:.1f}x"),
        ("", "", sqlite_cpu, f"{ratio['hub_cpu_vs_sqlite_insert_cpu']:.1f}x"),
        ("agents' CPU per workload (ms)", f"{report['agents_cpu_ms_per_workload']:.2f}", "", ""),
        ("nats-server CPU per workload (ms)", f"{report['nats_cpu_ms_per_workload']:.2f}", "", ""),
        ("report lag p50 / p99 / max (ms)", f"{report['report_lag_p50_ms']:.0f} / "
         f"{report['report_lag_p99_ms']:.0f} / {report['report_lag_max_ms']:.0f}", "", ""),
    ]  # fmt: skip
    lines = ["| metric | hub | floor | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Hub CPU per workload beside the floors' CPU per request, and the drain rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floors = report["floors"]
    fig, (cost, rate) = plt.subplots(1, 2, figsize=(8, 3.2), gridspec_kw={"width_ratios": [3, 1]})
    labels = ["hub / workload", "bare aiohttp / POST", "SQLite insert / row"]
    values = [
        report["hub_cpu_ms_per_workload"],
        floors["http_cpu_ms_per_request"],
        floors["sqlite_cpu_ms_per_row"],
    ]
    cost.bar(labels, values, color=["tab:red", "tab:gray", "tab:gray"])
    cost.set_yscale("log")
    cost.set_ylabel("CPU ms")
    cost.set_title(f"{report['workloads']} workloads at concurrency {report['concurrency']}")
    rate.bar(["drained"], [report["drained_per_s"]], color="tab:blue")
    rate.set_ylabel("workloads/s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for all terminal")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plot", help="save a bar chart to this PNG")
    args = parser.parse_args(argv)
    if args.workloads < 1 or args.concurrency < 1 or args.agents < 1:
        parser.error("--workloads, --concurrency and --agents must be at least 1")
    return args


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Floors, then the burst; the report as a dict."""
    with tempfile.TemporaryDirectory(prefix="edgeplane-burst-") as tmp:
        # At least FLOOR_MIN requests and rows: CPU times tick in 10 ms steps.
        floors = await http_floor(max(FLOOR_MIN, args.workloads), args.concurrency, args.workloads)
        floors.update(await sqlite_floor(Path(tmp), max(FLOOR_MIN, args.workloads)))
        result = await burst(args, Path(tmp))
    return {
        "workloads": args.workloads,
        "concurrency": args.concurrency,
        "agents": args.agents,
        "cores": os.cpu_count(),
        **result,
        "floors": floors,
        "ratios": ratios(result, floors),
    }


def save_report(
    report: dict[str, Any],
    *,
    json_path: str | None,
    plot_path: str | None,
    draw: Callable[[dict[str, Any], str], None],
) -> None:
    """A bench's figures to ``json_path`` and its plot (``draw``) to ``plot_path``, where given."""
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    if plot_path:
        draw(report, plot_path)
        print(f"plot: {plot_path}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    print(
        f"burst: {args.workloads} workloads at concurrency {args.concurrency}, {args.agents} agents, "
        f"{os.cpu_count()} cores; accepted {report['accepted']}, refused {report['refused'] or 'none'}, "
        f"terminal {report['terminal']}"
    )
    print(table(report))
    save_report(report, json_path=args.json, plot_path=args.plot, draw=plot)
    return 0 if report["accepted"] == args.workloads else 1


if __name__ == "__main__":
    sys.exit(main())
