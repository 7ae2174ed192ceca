"""A hub that was itself frozen does not blame its nodes for the silence on waking.

Real processes: a nats-server, a ``controlplane serve`` hub and three ``edge-agent run`` agents
with 0.5 s leases; the hub is stopped with SIGSTOP for four leases, then continued.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from harness import spawn_agent, wait_for

from controlplane.natsd import NatsServer


def _events(database: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(database, timeout=5) as db:
        return [
            (kind, message) for kind, message in db.execute("SELECT kind, message FROM events ORDER BY id")
        ]


def _nodes(database: Path) -> dict[str, str]:
    try:
        with sqlite3.connect(database, timeout=5) as db:
            return dict(db.execute("SELECT name, status FROM nodes"))
    except sqlite3.OperationalError:  # the hub has not migrated its new store yet
        return {}


async def _async(value: object) -> object:
    return value


async def test_a_hub_frozen_for_several_leases_extends_them_instead_of_expiring_its_nodes(tmp_path):
    """Was: on waking from SIGSTOP the hub marked every node NotReady ("3 of 3 nodes silent at
    once: a partition"). Now it notices its own stall: one WARNING, a HubStalled event, the nodes
    stay Ready."""
    data_dir = tmp_path / "hub"
    database = data_dir / "edgeplane.sqlite3"
    hub_log = (tmp_path / "hub.log").open("wb")
    with NatsServer() as server:
        hub = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "serve", "--nats", server.url, "--port", "0",
             "--data-dir", str(data_dir), "--lease-missed", "2", "--log-level", "INFO"],
            stdout=hub_log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        agents = [spawn_agent(server.url, f"s{i}", tmp_path) for i in range(3)]
        try:
            await wait_for(
                lambda: _async(database.exists() and _nodes(database)),
                lambda n: isinstance(n, dict) and len(n) == 3 and set(n.values()) == {"Ready"},
                timeout=40,
                every=0.2,
            )
            await asyncio.sleep(1.0)  # a few ordinary rounds first: no stall is seen in them
            hub.send_signal(signal.SIGSTOP)
            await asyncio.sleep(2.0)  # four leases of 0.5 s
            hub.send_signal(signal.SIGCONT)
            await wait_for(
                lambda: _async([kind for kind, _ in _events(database)]),
                lambda kinds: "HubStalled" in kinds,  # type: ignore[operator]
                timeout=10,
                every=0.2,
            )
            await asyncio.sleep(1.5)  # rounds after the wake: time to wrongly expire a lease
            events = _events(database)
            assert not [e for e in events if e[0] in ("NodeNotReady", "NodeLost")], events
            assert _nodes(database) == {"s0": "Ready", "s1": "Ready", "s2": "Ready"}
            stalled = [message for kind, message in events if kind == "HubStalled"]
            assert len(stalled) == 1 and "leases extended" in stalled[0], stalled
        finally:
            hub.send_signal(signal.SIGCONT)
            for process in [*agents, hub]:
                process.terminate()
            for process in [*agents, hub]:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
            hub_log.close()
    text = (tmp_path / "hub.log").read_text()
    assert text.count("the hub stalled for") == 1, text[-3000:]
    assert "partition" not in text and "NotReady" not in text, text[-3000:]
