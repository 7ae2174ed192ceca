"""A unit cannot fill the node's disk (issue 20, item 7): the agent kills a workload whose work dir
grows over its ``ephemeral_storage`` (Failed, ``ephemeral_storage_exceeded``), one under its limit
runs to the end, and placement counts the storage the node reports.

Real parts only: nats-server, the hub with its HTTP API on SQLite, a real ``edge-agent run``
process and real ``sh`` workloads writing real blocks into their work dirs.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import PYTHON_FUNCTIONS, running_agents, running_hub, spawn_agent, wait_for

MiB = 2**20

# Writes $CHUNKS MiB into its work dir (its current directory), one MiB every 0.1 s, noting how
# many it has written in $PROGRESS (a file the test can read); then waits for the file $GO if set.
WRITER = [
    "sh",
    "-c",
    'i=0; while [ $i -lt "$CHUNKS" ]; do head -c 1048576 /dev/zero >> data; i=$((i+1)); '
    'echo $i > "$PROGRESS"; sleep 0.1; done; '
    'if [ -n "$GO" ]; then while [ ! -f "$GO" ]; do sleep 0.05; done; fi',
]


def _written(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


async def test_a_workload_over_its_ephemeral_storage_is_killed_and_placement_counts_storage(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    agent = spawn_agent(nats_server.url, "disk1", tmp_path)
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            ready = await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready", timeout=20)
            node = ready[0]
            offered = node["resources"]["ephemeral_storage"]
            assert offered > 100 * MiB, node["resources"]  # the free space where work dirs live

            hog_progress = shared_dir / "hog"
            started = time.monotonic()
            hog = await api.post_workload(
                {
                    "name": "hog",
                    "command": WRITER,
                    "env": {"CHUNKS": "64", "PROGRESS": str(hog_progress)},
                    "resources": {"ephemeral_storage": "8Mi"},
                }
            )
            failed = await api.wait_status(hog, "Failed", "Succeeded", timeout=20)
            took = time.monotonic() - started
            assert failed["status"] == "Failed", failed
            [placement] = failed["placements"]
            message = placement.get("message") or failed.get("message") or ""
            assert "ephemeral_storage_exceeded" in message, failed
            assert str(8 * MiB) in message  # the limit, and the usage beside it
            # Killed within a few seconds of crossing 8 MiB (at 10 MiB/s): far from the 64 it wanted.
            written = _written(hog_progress)
            assert 8 <= written < 40, written
            assert took < 15, took

            # Under its limit: runs to the end; while it runs the node shows its storage allocated.
            small_progress, go = shared_dir / "small", shared_dir / "go"
            small = await api.post_workload(
                {
                    "name": "small",
                    "command": WRITER,
                    "env": {"CHUNKS": "2", "PROGRESS": str(small_progress), "GO": str(go)},
                    "resources": {"ephemeral_storage": "8Mi"},
                }
            )
            await api.wait_status(small, "Running", timeout=15)
            await wait_for(lambda: _value(_written(small_progress)), lambda n: n == 2, timeout=10)
            [node] = await api.nodes()
            assert node["allocated"]["ephemeral_storage"] == 8 * MiB, node["allocated"]

            # More than the node has: it waits, and the reason names ephemeral storage.
            huge = await api.post_workload(
                {"name": "huge", "command": ["true"], "resources": {"ephemeral_storage": "100Ti"}}
            )
            events = await wait_for(
                lambda: api.get(f"/v1/events?kind=FailedScheduling&object_id={huge}"),
                lambda e: bool(e["items"]),
                timeout=10,
            )
            assert "ephemeral storage" in events["items"][-1]["message"], events
            assert (await api.workload(huge))["status"] == "Pending"

            go.touch()
            done = await api.wait_status(small, "Succeeded", "Failed", timeout=15)
            assert done["status"] == "Succeeded", done
    finally:
        agent.terminate()
        agent.wait(timeout=10)


async def _value(value: int) -> int:
    return value


# Writes 32 MiB into its instance's work dir, a MiB every 0.1 s.
FILLER = """
import time

def handle(event, context):
    with open("data", "ab") as out:
        for _ in range(32):
            out.write(bytes(1 << 20))
            out.flush()
            time.sleep(0.1)
    return "wrote 32 MiB"
"""


async def test_a_function_instance_over_its_ephemeral_storage_is_stopped(nats_server, sqlite_url, tmp_path):
    # One invocation, one instance: no headroom spare beside it (test_functions.py covers those).
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="edgeplane-no-headroom") as (_, api),
        running_agents(nats_server.url, tmp_path, ["fn1"], **PYTHON_FUNCTIONS) as agents,
    ):
        body = {"name": "filler", "source": FILLER, "handler": "handle", "ephemeral_storage": "4Mi"}
        status, reply = await api.call("POST", "/v1/functions", body)
        assert status in (200, 201), reply
        async with api.session.post(f"{api.base}/v1/functions/filler/invoke", json={}) as response:
            result = await response.json()
        assert response.status >= 400 and "ephemeral_storage_exceeded" in str(result), result
        assert not agents[0].agent.functions.instances  # the instance is gone
