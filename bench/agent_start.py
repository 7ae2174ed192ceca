"""Measure what the agent pays to start one placement's process, against the floor measured in
the same run.

Builds the agent's real confinement (:meth:`Confinement.detect`: the run user, unit cgroups,
seccomp; :func:`detect_cpu_limiter`: the CPU quota group) and starts ``N`` placements ``["true"]``
through :func:`edge_agent.placement_process.start_process`, one at a time with ``--gap-ms``
between them (a lone POST after an idle spell pays what a burst does not: see below), interleaved
with the floor, a bare ``asyncio.create_subprocess_exec("true")``. Usage:

    python bench/agent_start.py [--starts 50] [--gap-ms 200] [--ballast-mb 80] [--bid-lead-ms 15]
        [--spawner both|agent|spawner] [--json out.json]

Printed per start (ms), for each path (``--spawner both``, the default, alternates them start by
start: ``agent`` forks the unit itself, ``spawner`` asks the unit spawner, a small process of the
agent's, to fork it: ``edge_agent/spawner.py``): ``prepare`` (work dir, gid, unit groups, CPU
group), ``spawn`` (the rest of :func:`start_process`, mainly the Popen with the child's setup:
fork, joining the cgroups, limits, the uid drop, no_new_privs, seccomp, exec), ``total``,
``loop_held_ms`` (the longest the agent's event loop went without a turn meanwhile: a Popen runs
in a worker thread, ``edge_agent/spawn.py``, so it is a few ms, not the whole start); p50/p99, the
ratio of the total to the floor and, with both paths, of the spawner's to the agent's.

``--ballast-mb`` grows this process like an agent's heap: a ``preexec_fn`` forces ``fork``
(not ``vfork``), whose cost grows with the parent's memory. The cgroup line says whether moving
a process between cgroups may wait an RCU grace period (the first move after an idle spell, about
10 ms on cgroup v1 or v2 without ``favordynmods``) or not (a ``favordynmods`` mount; on Linux
6.18+ that also switches the kernel to a per-process lock for the rest of its uptime).
Every other start is *primed*: ``--bid-lead-ms`` before it, the agent's cgroup primer is told a
start is likely, as an accepted bid tells it (``edge_agent/cgroup_primer.py``); ``spawn_primed``
and ``total_primed`` are those starts, and the ratio to the unprimed ones is printed.
Run as root to measure the confinement a production agent applies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.cgroup_primer import CgroupPrimer
from edge_agent.cgroups import detect_cpu_limiter
from edge_agent.confinement import Confinement
from edge_agent.placement_process import RunningPlacement, start_process


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _favordynmods() -> str:
    """Which cgroup mounts carry ``favordynmods`` (moves do not wait a grace period), or "no"."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return "?"
    found = [line.split()[4] for line in lines if " - cgroup" in line and "favordynmods" in line]
    return ",".join(found) or "no"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _floor_once() -> float:
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec("true", stdin=asyncio.subprocess.DEVNULL)
    spent = (time.perf_counter() - began) * 1000
    await process.wait()
    return spent


async def _longest_gap(stop: asyncio.Event) -> float:
    """The longest the event loop went without running this task while a start ran (ms): how
    long the start held the loop (a bid, a report or a command waits that long)."""
    longest, last = 0.0, time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.0005)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return longest * 1000


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--gap-ms", type=float, default=200.0, help="idle time before each start")
    parser.add_argument("--ballast-mb", type=int, default=80, help="grow this process like an agent's heap")
    parser.add_argument(
        "--bid-lead-ms",
        type=float,
        default=15.0,
        help="for every other start, how long before it the agent's cgroup primer is told a start is "
        "likely (as an accepted bid does; edge_agent/cgroup_primer.py)",
    )
    parser.add_argument(
        "--spawner",
        choices=["both", "agent", "spawner"],
        default="both",
        help="who forks: the agent itself, the unit spawner (edge_agent/spawner.py), or both interleaved",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    ballast = bytearray(args.ballast_mb * 2**20)
    for offset in range(0, len(ballast), 4096):  # touch every page: fork copies page tables
        ballast[offset] = 1
    paths = ["agent", "spawner"] if args.spawner == "both" else [args.spawner]
    rows: dict[str, list[float]] = {"prepare_ms": [], "floor_ms": []}
    for path in paths:
        for suffix in ("", "_primed"):
            rows[f"{path}_spawn{suffix}_ms"] = []
            rows[f"{path}_total{suffix}_ms"] = []
        rows[f"{path}_loop_held_ms"] = []
    with tempfile.TemporaryDirectory(prefix="agent-start-") as tmp:
        node = f"bench-start-{os.getpid()}"
        work_dir = Path(tmp) / "agent"
        limiter = detect_cpu_limiter(node)
        confinement = Confinement.detect(node=node, work_dir=work_dir, pids_max=512)
        primer = CgroupPrimer.detect(confinement.groups)
        log_path = work_dir / "out.log"
        spawner = None
        if "spawner" in paths:
            await confinement.start_spawner()
            spawner = confinement.spawner
            if spawner is None:
                print("the unit spawner did not start", file=sys.stderr)
                return 1
        try:
            await _floor_once()  # warm the event loop's child watcher
            for i in range(args.starts):
                # Interleaved: the path alternates every start, priming every other pair.
                path = paths[i % len(paths)]
                confinement.pin_spawner(spawner if path == "spawner" else None)
                await asyncio.sleep(args.gap_ms / 1000)
                rows["floor_ms"].append(await _floor_once())
                primed = (i // len(paths)) % 2 == 1 and primer.enabled
                if primed:
                    await asyncio.sleep(max(0.0, args.gap_ms - args.bid_lead_ms) / 1000)
                    primer.expect_start()
                    await asyncio.sleep(args.bid_lead_ms / 1000)
                else:
                    await asyncio.sleep(args.gap_ms / 1000)
                state = PlacementState(placement_id=f"p{i}", workload_id=f"w{i}", state="Running")
                entry = RunningPlacement(state=state, spec=RunSpec(command=["true"], cpu=0.5), cpu=0.5)
                entry.memory = 256 * 2**20
                ticks = asyncio.create_task(_longest_gap(stop := asyncio.Event()))
                await asyncio.sleep(0)
                began = time.perf_counter()
                entry.sandbox = confinement.open(state.placement_id)
                limiter.prepare(state.placement_id, entry.cpu)
                prepared = time.perf_counter()
                error = await start_process(
                    entry, confinement=confinement, cpu_limiter=limiter, log_path=log_path
                )
                done = time.perf_counter()
                stop.set()
                rows[f"{path}_loop_held_ms"].append(await ticks)
                if error is not None or entry.process is None:
                    print(f"start {i} failed: {error}", file=sys.stderr)
                    return 1
                rows["prepare_ms"].append((prepared - began) * 1000)
                suffix = "_primed" if primed else ""
                rows[f"{path}_spawn{suffix}_ms"].append((done - prepared) * 1000)
                rows[f"{path}_total{suffix}_ms"].append((done - began) * 1000)
                await entry.process.wait()
                await confinement.kill(entry.sandbox, entry.process)
                confinement.close(entry.sandbox)
                limiter.release(state.placement_id)
        finally:
            confinement.pin_spawner(spawner)
            await confinement.stop_spawner()
            confinement.shutdown()
            limiter.close()
    floor = statistics.median(rows["floor_ms"])
    summary = {key: {"p50": statistics.median(v), "p99": _pct(v, 0.99)} for key, v in rows.items() if v}
    print(
        f"agent start, {args.starts} starts, gap {args.gap_ms:.0f} ms, rss {_rss_mb():.0f} MB, "
        f"uid {os.geteuid()}, favordynmods mounts: {_favordynmods()}, load {_load()}"
    )
    print(f"isolation: {', '.join(f'{k}={v}' for k, v in confinement.report.items())}")
    for key, value in summary.items():
        print(f"  {key:28s} p50 {value['p50']:7.2f}  p99 {value['p99']:7.2f}")
    for path in paths:
        total = summary[f"{path}_total_ms"]["p50"]
        print(f"  {path}: total/floor (p50) {total / floor:.1f}x", end="")
        if f"{path}_total_primed_ms" in summary:
            primed_p50 = summary[f"{path}_total_primed_ms"]["p50"]
            print(
                f"; primed {args.bid_lead_ms:.0f} ms ahead: total p50 {primed_p50:.2f} ms, "
                f"{primed_p50 / total:.2f}x the unprimed, {primed_p50 / floor:.1f}x the floor"
            )
        else:
            print("; primer off here (units get no cgroups, or the agent's own group is not writable)")
    if len(paths) == 2:
        for suffix in ("", "_primed"):
            key = f"total{suffix}_ms"
            if f"agent_{key}" in summary and f"spawner_{key}" in summary:
                ratio = summary[f"spawner_{key}"]["p50"] / summary[f"agent_{key}"]["p50"]
                print(f"  spawner/agent, {key} p50: {ratio:.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"summary": summary, "load": _load(), "favordynmods": _favordynmods(), "rows": rows}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
