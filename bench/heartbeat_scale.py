"""Heartbeat scale bench: K impersonated agents heartbeating at 1 Hz against ``controlplane serve``.

    python bench/heartbeat_scale.py --agents 1000,5000,10000 --seconds 20 --json F [--plot F.png]

For each K: a nats-server of its own (anonymous: ``controlplane serve --nats URL`` without a seed
does not require enrolment) and ``controlplane serve`` as a process of its own on a fresh SQLite
data dir. A few load-generator processes, each with one NATS connection, impersonate the K agents
with the real contract: each node registers (``RegisterV1`` as a request on its register subject,
retried as an agent does: after the hub's ``retry_after_s`` with the agent's jitter when the hub
gives one, else after a random 0.5-2 s; a request unanswered in 3 s counts as unanswered), then
publishes ``HeartbeatV1`` on its heartbeat subject once a second, the nodes' phases spread over the
second. All K register at once: the time until the last is admitted is the re-registration
storm's (``register_s``).

Measured over the steady window of ``--seconds`` after a short warm-up: the hub's CPU cores (its
own CPU time over the window's wall time, psutil), its RSS at the end, the heartbeat handling lag
p99 (receive time minus ``sent_at``, from the hub's ``edgeplane_heartbeat_lag_seconds`` histogram
when the hub has it: a bucket's upper bound), and the false NotReady: the lease expiries the hub
counted over the whole run (``edgeplane_lease_expiries``; every impersonated node heartbeats on
time, so every expiry is false), with the part of them during the storm and warm-up in brackets.
Whether the generator kept its own schedule is measured beside it: its worst lateness against the
1 Hz schedule and the longest gap between a node's admission and its first heartbeat (a gap over
the lease is the generator's silence, not a false NotReady of the hub).

The floor, in the same run: a bare nats-py subscriber in a process of its own on the same wildcard,
counting the same messages; its CPU cores over the same window. The table gives both and the ratio.

The code under test is whatever ``python -m controlplane.cli`` imports: run with
``PYTHONPATH=<tree>`` to bench another tree.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from burst import printed_url, save_report  # bench/ is this script's directory

API_LINE = re.compile(r"edgeplane hub: API (\S+)")
CLUSTER = "default"
HEARTBEAT_S = 1.0
NODES_PER_GENERATOR = 2500
# Per generator: every node at once, as a fleet re-registering after a hub restart does; each
# request waits as long as an agent's (edge_agent/registration.py) before it is asked again.
REGISTER_IN_FLIGHT = NODES_PER_GENERATOR
REGISTER_TIMEOUT_S = 3.0
# Frames on every stack (the loop, the threads, the entry point): left out of the top entries.
GENERIC_FRAMES = ("asyncio/", "threading.py", "<frozen runpy>", "controlplane/cli.py", "commands/serve.py",
                  "concurrent/futures/thread.py")  # fmt: skip
LAG_METRIC = "edgeplane_heartbeat_lag_seconds"
EXPIRY_METRIC = "edgeplane_lease_expiries_total"


def own_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process itself (not of its children)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


# --- the load generator (a process of its own) -------------------------------------------------


def _register_message(node: str, boot_id: str) -> Any:
    from edgeplane_contract.messages import NodeResources, RegisterV1, Telemetry

    return RegisterV1(
        node=node,
        cluster=CLUSTER,
        boot_id=boot_id,
        agent_version="heartbeat-bench",
        resources=NodeResources(cpu=4.0, memory=8 * 2**30),
        heartbeat_interval_s=HEARTBEAT_S,
        telemetry=Telemetry(cpu_percent=5.0, memory_used_bytes=2**30, memory_total_bytes=8 * 2**30),
    )


async def _generate(url: str, nodes: list[str], out: Any, stop: Any) -> None:
    import nats

    from edgeplane_contract.messages import HeartbeatV1, RegisterAckV1, Subjects, Telemetry, decode, encode

    from edge_agent.registration import retry_delay

    subjects = Subjects(cluster=CLUSTER)
    nc = await nats.connect(url, name="heartbeat-bench", max_reconnect_attempts=-1)
    boots = {node: uuid.uuid4().hex for node in nodes}
    gate = asyncio.Semaphore(REGISTER_IN_FLIGHT)
    began = time.monotonic()
    retries = 0

    # 1 Hz per node, phases spread over the second in 100 slots; a node heartbeats from the moment
    # its registration is admitted (as an agent does), while the others are still registering.
    slots: list[list[str]] = [[] for _ in range(100)]
    live: set[str] = set()
    admitted_at: dict[str, float] = {}  # node -> when its admission came back, until its 1st heartbeat
    late_max = first_gap_max = 0.0  # this generator's own lateness: a late heartbeat is its silence
    for index, node in enumerate(nodes):
        slots[index % 100].append(node)

    async def register(node: str) -> None:
        nonlocal retries
        payload = encode(_register_message(node, boots[node]))
        while True:
            delay = random.uniform(0.5, 2.0)
            async with gate:
                try:
                    reply = await nc.request(subjects.register(node), payload, timeout=REGISTER_TIMEOUT_S)
                    ack = decode(reply.data, RegisterAckV1)
                    if ack.accepted:
                        live.add(node)
                        admitted_at[node] = time.monotonic()
                        return
                    if ack.retry_after_s is not None:  # the hub's turn, with the agent's jitter
                        delay = retry_delay(ack.retry_after_s)
                except Exception:  # unanswered in time: the agent tries again
                    pass
            retries += 1
            await asyncio.sleep(delay)

    async def register_all() -> None:
        await asyncio.gather(*(register(node) for node in nodes))
        out.put(("registered", len(nodes), time.monotonic() - began, retries))

    registering = asyncio.create_task(register_all())
    telemetry = Telemetry(cpu_percent=5.0, memory_used_bytes=2**30, memory_total_bytes=8 * 2**30, power_w=7.2)
    if hasattr(telemetry, "power_method"):  # as a real agent sends it (older trees lack the field)
        telemetry.power_method = "model"
    seq = 0
    start = time.monotonic()
    sent = 0
    while not stop.is_set():
        seq += 1
        for slot_index, slot in enumerate(slots):
            due = start + (seq - 1) * HEARTBEAT_S + slot_index * HEARTBEAT_S / len(slots)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late_max = max(late_max, -delay)
            now = time.time()
            for node in slot:
                if node not in live:
                    continue
                if node in admitted_at:
                    first_gap_max = max(first_gap_max, time.monotonic() - admitted_at.pop(node))
                heartbeat = HeartbeatV1(
                    node=node, boot_id=boots[node], seq=seq, sent_at=now, telemetry=telemetry
                )
                await nc.publish(subjects.heartbeat(node), encode(heartbeat))
                sent += 1
        await nc.flush(timeout=10)
    registering.cancel()
    out.put(("sent", sent, late_max, first_gap_max))
    await nc.close()


def generator_main(url: str, nodes: list[str], out: Any, stop: Any) -> None:
    asyncio.run(_generate(url, nodes, out, stop))


async def _floor(url: str, out: Any, stop: Any) -> None:
    import nats

    from edgeplane_contract.messages import Subjects

    count = 0

    async def seen(_msg: Any) -> None:
        nonlocal count
        count += 1

    nc = await nats.connect(url, name="heartbeat-floor")
    await nc.subscribe(Subjects(cluster=CLUSTER).agent_wildcard("heartbeat"), cb=seen)
    await nc.flush()
    out.put(("floor_ready",))
    await asyncio.to_thread(stop.wait)
    await nc.close()
    out.put(("floor_count", count))


def floor_main(url: str, out: Any, stop: Any) -> None:
    """A bare nats-py subscriber on the heartbeat wildcard that only counts (the floor)."""
    asyncio.run(_floor(url, out, stop))


# --- the hub and its metrics ----------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, Any]:
    """The lease expiries (summed over clusters) and the heartbeat lag histogram's buckets."""
    expiries = 0.0
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(EXPIRY_METRIC):
            expiries += float(line.rsplit(" ", 1)[1])
        elif line.startswith(LAG_METRIC + "_bucket"):
            bound = re.search(r'le="([^"]+)"', line)
            if bound:
                buckets[float(bound.group(1))] = float(line.rsplit(" ", 1)[1])
    return {"expiries": expiries, "lag_buckets": buckets}


def p99_of(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The upper bound of the bucket holding the 99th percentile of the observations between two
    scrapes of a cumulative histogram (None: no histogram, or nothing observed)."""
    if not after:
        return None
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None
    for bound, count in zip(bounds, counts, strict=True):
        if count >= 0.99 * total:
            return bound
    return bounds[-1]


async def _scrape(http: aiohttp.ClientSession, api: str) -> dict[str, Any]:
    async with http.get(f"{api}/metrics") as response:
        return parse_metrics(await response.text())


async def _count_nodes(http: aiohttp.ClientSession, api: str, status: str | None = None) -> int:
    query = f"?status={status}&limit=1" if status else "?limit=1"
    async with http.get(f"{api}/v1/nodes{query}") as response:
        return int((await response.json())["total"])


def top_frames(collapsed: Path, count: int = 15) -> list[tuple[str, float]]:
    """The functions with the most samples anywhere on the stack (share of all samples), from a
    py-spy ``--format raw`` (collapsed stacks) file."""
    totals: dict[str, int] = {}
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        samples += int(n)
        for frame in set(stack.split(";")):
            if any(skip in frame for skip in GENERIC_FRAMES):
                continue
            totals[frame] = totals.get(frame, 0) + int(n)
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return [(frame, value / samples) for frame, value in ranked] if samples else []


def _profile(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    """py-spy on the hub for ``seconds`` (or until SIGINT, which still writes the file); ``--gil``:
    only the samples of the thread holding the GIL, i.e. where the hub's CPU goes, not its idle
    waits in ``select``."""
    command = ["py-spy", "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
               "--format", "raw", "--rate", "100", "--gil", "--nonblocking", "-o", str(path)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _end_profile(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is None:
        return
    if profiler.poll() is None:
        profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(timeout=60)
    except subprocess.TimeoutExpired:
        profiler.kill()


async def one_run(
    agents: int,
    seconds: float,
    warmup_s: float,
    tmp: Path,
    profile_dir: Path | None = None,
    register_timeout_s: float = 120.0,
) -> dict[str, Any]:
    """K agents against a fresh nats-server and hub; the figures of the run."""
    from controlplane.natsd import NatsServer

    data = tmp / f"hub-{agents}"
    data.mkdir()
    log = tmp / f"serve-{agents}.log"
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    with NatsServer() as natsd:
        command = [
            sys.executable, "-m", "controlplane.cli", "serve", "--nats", natsd.url, "--port", "0",
            "--data-dir", str(data), "--rate-limit", "0", "--log-level", "WARNING",
        ]  # fmt: skip
        with log.open("wb") as sink:
            serve = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        procs: list[Any] = []
        try:
            api = await printed_url(serve, log, API_LINE, what="controlplane serve", timeout_s=60)
            token = (data / "admin.token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            floor = ctx.Process(target=floor_main, args=(natsd.url, out, stop), daemon=True)
            floor.start()
            procs.append(floor)
            await asyncio.to_thread(_expect, out, "floor_ready", 30)
            storm_profiler = None
            if profile_dir is not None:  # the registration storm, until the last is admitted
                storm_path = profile_dir / f"hub-{agents}-storm.txt"
                storm_profiler = _profile(serve.pid, register_timeout_s, storm_path)
            names = [f"hb-{i:05d}" for i in range(agents)]
            generators = max(1, math.ceil(agents / NODES_PER_GENERATOR))
            for g in range(generators):
                part = names[g::generators]
                proc = ctx.Process(target=generator_main, args=(natsd.url, part, out, stop), daemon=True)
                proc.start()
                procs.append(proc)
            register_s: float | None = 0.0
            retries = 0
            floor_counts: list[tuple[int, float]] = []
            deadline = time.monotonic() + register_timeout_s
            for _ in range(generators):
                try:
                    left = max(0.1, deadline - time.monotonic())
                    item = await asyncio.to_thread(_expect, out, "registered", left, floor_counts)
                except (TimeoutError, queue.Empty):  # not absorbed in time: measured as it is
                    register_s = None
                    break
                register_s, retries = max(register_s or 0.0, item[2]), retries + item[3]
            await asyncio.to_thread(_end_profile, storm_profiler)
            async with aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=60)
            ) as http:
                await asyncio.sleep(warmup_s)
                before = await _scrape(http, api)
                hub = psutil.Process(serve.pid)
                profiler = None
                if profile_dir is not None:
                    profiler = _profile(serve.pid, seconds, profile_dir / f"hub-{agents}.txt")
                floor_pid = floor.pid
                assert floor_pid is not None  # started above
                hub_cpu0, floor_cpu0, began = own_cpu_s(serve.pid), own_cpu_s(floor_pid), time.monotonic()
                await asyncio.sleep(seconds)
                wall = time.monotonic() - began
                hub_cpu, floor_cpu = own_cpu_s(serve.pid) - hub_cpu0, own_cpu_s(floor_pid) - floor_cpu0
                rss_mb = hub.memory_info().rss / 2**20
                after = await _scrape(http, api)
                not_ready_now = await _count_nodes(http, api, "NotReady")
                known = await _count_nodes(http, api)
                if profiler is not None:
                    await asyncio.to_thread(profiler.wait, 60)
            stop.set()
            sent = 0
            late_max = first_gap_max = 0.0
            for _ in range(generators):
                item = await asyncio.to_thread(_expect, out, "sent", 60, floor_counts)
                sent += item[1]
                late_max, first_gap_max = max(late_max, item[2]), max(first_gap_max, item[3])
        finally:
            stop.set()
            serve.send_signal(signal.SIGINT)
            try:
                serve.wait(timeout=20)
            except subprocess.TimeoutExpired:
                serve.kill()
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
    return {
        "agents": agents,
        "hub_cpu_cores": hub_cpu / wall,
        "rss_mb": rss_mb,
        "lag_p99_ms": None
        if (p99 := p99_of(before["lag_buckets"], after["lag_buckets"])) is None
        else 1000 * p99,
        "false_not_ready": int(after["expiries"]),
        # Of those, the ones during the storm and warm-up, and the load generator's own lateness:
        # a heartbeat it sent later than the lease after the previous one (or after the admission)
        # was the generator's silence, not the hub's mistake.
        "not_ready_in_storm": int(before["expiries"]),
        "generator_late_max_ms": 1000 * late_max,
        "first_heartbeat_gap_max_ms": 1000 * first_gap_max,
        "not_ready_at_end": not_ready_now,
        "nodes_known": known,
        "register_s": register_s,  # None: the storm was not absorbed within --register-timeout
        "register_retries": retries,
        "heartbeats_sent": sent,
        "floor_cpu_cores": floor_cpu / wall,
        "cpu_ratio": (hub_cpu / floor_cpu) if floor_cpu > 0 else None,
        "hub_cpu_us_per_heartbeat": 1e6 * hub_cpu / (agents * wall / HEARTBEAT_S),
    }


def _expect(out: Any, kind: str, timeout_s: float, skipped: list[Any] | None = None) -> tuple[Any, ...]:
    """The next message of ``kind`` from the child processes (the floor's counts are set aside)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {kind!r} from the load generators within {timeout_s:.0f} s")
        try:
            item = out.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"no {kind!r} from the load generators within {timeout_s:.0f} s") from None
        if item[0] == kind:
            return tuple(item)
        if skipped is not None:
            skipped.append(item)


# --- report -----------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def table(report: dict[str, Any]) -> str:
    lines = [
        "| agents | hub CPU cores | floor CPU cores | ratio | hub µs/heartbeat | RSS MB | lag p99 ms "
        "| false NotReady (in storm) | register storm s | generator late max ms | 1st heartbeat gap max ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        cells = [
            str(run["agents"]), _fmt(run["hub_cpu_cores"], 3), _fmt(run["floor_cpu_cores"], 3),
            _fmt(run["cpu_ratio"], 1) + "x" if run["cpu_ratio"] else "n/a",
            _fmt(run["hub_cpu_us_per_heartbeat"], 0), _fmt(run["rss_mb"], 0), _fmt(run["lag_p99_ms"], 0),
            f"{run['false_not_ready']} ({run.get('not_ready_in_storm', 'n/a')})", _fmt(run["register_s"], 1),
            _fmt(run.get("generator_late_max_ms"), 0), _fmt(run.get("first_heartbeat_gap_max_ms"), 0),
        ]  # fmt: skip
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def floor_lines(report: dict[str, Any]) -> list[str]:
    """One line per fleet size: the hub's CPU against the bare subscriber's in the same run (the
    figure that holds on a shared, noisy machine)."""
    lines = []
    for run in report["runs"]:
        ratio = run["cpu_ratio"]
        lines.append(
            f"floor ratio at {run['agents']} agents: hub {run['hub_cpu_cores']:.3f} cores = "
            + (f"{ratio:.1f}x" if ratio else "n/a")
            + f" the bare subscriber's {run['floor_cpu_cores']:.3f}"
        )
    return lines


def plot(report: dict[str, Any], path: str) -> None:
    """Hub CPU cores against agents, beside the floor's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    agents = [r["agents"] for r in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(agents, [r["hub_cpu_cores"] for r in runs], "o-", color="tab:red", label="hub")
    ax.plot(agents, [r["floor_cpu_cores"] for r in runs], "s--", color="tab:gray", label="bare subscriber")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":", label="one core")
    ax.set_xlabel("agents heartbeating at 1 Hz")
    ax.set_ylabel("CPU cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", default="1000,5000,10000", help="comma-separated fleet sizes")
    parser.add_argument("--seconds", type=float, default=20.0, help="steady window per fleet size")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the last registration")
    parser.add_argument(
        "--register-timeout",
        type=float,
        default=120.0,
        help="seconds the storm may take (then measured anyway)",
    )
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--plot", help="save hub CPU against agents to this PNG")
    parser.add_argument(
        "--py-spy", dest="py_spy", help="profile the hub over each steady window into this dir"
    )
    args = parser.parse_args(argv)
    try:
        args.agent_counts = [int(a) for a in args.agents.split(",") if a.strip()]
    except ValueError:
        parser.error("--agents takes comma-separated integers")
    if not args.agent_counts or min(args.agent_counts) < 1 or args.seconds <= 0:
        parser.error("--agents must be at least 1 and --seconds positive")
    return args


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edgeplane-heartbeats-") as tmp:
        profile_dir = Path(args.py_spy) if args.py_spy else None
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
        runs = [
            await one_run(k, args.seconds, args.warmup, Path(tmp), profile_dir, args.register_timeout)
            for k in args.agent_counts
        ]
    return {"cores": os.cpu_count(), "seconds": args.seconds, "heartbeat_s": HEARTBEAT_S, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    print(
        f"heartbeat scale: {args.agents} agents at 1 Hz, {args.seconds:.0f} s steady, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}"
    )
    print(table(report))
    for line in floor_lines(report):
        print(line)
    save_report(report, json_path=args.json, plot_path=args.plot, draw=plot)
    if args.py_spy:
        for k in args.agent_counts:
            for suffix, what in (("", "heartbeating"), ("-storm", "registering at once")):
                collapsed = Path(args.py_spy) / f"hub-{k}{suffix}.txt"
                if collapsed.exists():
                    print(f"profile of the hub, {k} agents {what} (share of GIL samples on the stack):")
                    for frame, share in top_frames(collapsed):
                        print(f"  {100 * share:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
