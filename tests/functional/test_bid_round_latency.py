"""The bid round's latency: it ends when the nodes it waits for have answered, and a node whose
local policy lets a deadline pass stalls one placement at most, not every one after it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import nats
from harness import Api, register_fake, running_agents, running_hub, wait_for

from edgeplane_contract.messages import (
    BidRequestV1,
    BidV1,
    HeartbeatV1,
    Subjects,
    Telemetry,
    decode,
    encode,
)

# Long enough that a round which waits for it cannot pass for one that did not.
DEADLINE_MS = 2000.0
POLICY = Telemetry(cpu_percent=1, memory_used_bytes=1, memory_total_bytes=2**34, policy="onnx-int8")


async def heartbeats(nc: nats.NATS, subjects: Subjects, name: str, boot: str) -> None:
    seq = 0
    while True:
        seq += 1
        hb = HeartbeatV1(node=name, boot_id=boot, seq=seq, sent_at=time.time(), telemetry=POLICY)
        await nc.publish(subjects.heartbeat(name), encode(hb))
        await asyncio.sleep(0.2)


async def placed_in(api: Api, name: str, nodes: list[str]) -> tuple[float, dict[str, dict[str, Any]]]:
    """POST a workload that may go to ``nodes``; seconds until its placement was decided, and
    its bid round's rows by node."""
    started = time.monotonic()
    workload_id = await api.post_workload({"name": name, "command": ["true"], "affinity": {"nodes": nodes}})
    placement = await wait_for(
        lambda: api.get(f"/v1/workloads/{workload_id}/placement"),
        lambda p: bool(p["decisions"]),
        every=0.02,
    )
    took = time.monotonic() - started
    rows = placement["decisions"][0]["explanation"]["bids"]["candidates"]
    return took, {row["node"]: row for row in rows}


async def test_a_round_where_every_node_answers_ends_without_waiting_for_the_deadline(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url, bid_deadline_ms=DEADLINE_MS) as (_, api),
        running_agents(nats_server.url, tmp_path, ["a1", "a2"]),
    ):
        await wait_for(api.nodes, lambda n: len(n) == 2 and all(x["telemetry"].get("policy") for x in n))
        for i in range(3):
            took, rows = await placed_in(api, f"prompt-{i}", ["a1", "a2"])
            assert all(row["answered"] for row in rows.values()), rows
            assert took < DEADLINE_MS / 1000 / 2, f"placement {i} took {took:.3f}s: the round waited"


async def test_a_node_that_never_answers_bids_stalls_one_placement_not_every_one(
    nats_server, sqlite_url, tmp_path
):
    """A fake node advertises a local policy and takes bid requests but answers none, until it
    recovers: the first round waits the deadline for it; later rounds ask it without waiting
    (it is on probation); once it answers in time, rounds wait for it again and its bid counts."""
    nc = await nats.connect(nats_server.url)
    subjects = Subjects("default")
    asked = 0
    answering = False

    async def on_bid(msg: Any) -> None:
        nonlocal asked
        request = decode(msg.data, BidRequestV1)
        asked += 1
        if answering:
            bid = BidV1(request_id=request.request_id, node="mute", accept=True, action=8, score=0.0)
            await msg.respond(encode(bid))

    await nc.subscribe(subjects.bid("mute"), cb=on_bid)
    boot = uuid.uuid4().hex
    try:
        async with running_hub(nats_server.url, sqlite_url, bid_deadline_ms=DEADLINE_MS) as (_, api):
            await register_fake(nc, subjects, "mute", boot, POLICY)
            beating = asyncio.create_task(heartbeats(nc, subjects, "mute", boot))
            try:
                async with running_agents(nats_server.url, tmp_path, ["quick"]):
                    await wait_for(api.nodes, lambda n: len(n) == 2)
                    nodes = ["quick", "mute"]
                    took, rows = await placed_in(api, "first", nodes)
                    assert took >= DEADLINE_MS / 1000, "the first round did not wait for the mute node"
                    assert rows["mute"]["answered"] is False and "waited" not in rows["mute"]
                    for i in range(3):
                        took, rows = await placed_in(api, f"after-{i}", nodes)
                        assert took < DEADLINE_MS / 1000 / 2, f"placement {i} waited {took:.3f}s for it"
                        assert rows["mute"]["asked"] is True and rows["mute"]["waited"] is False
                        assert rows["mute"]["value"] == rows["mute"]["hub_reward"]
                        assert rows["quick"]["answered"] is True
                    assert asked == 4, "a node on probation is still asked"
                    answering = True
                    await placed_in(api, "recovering", nodes)  # its answer ends the probation
                    took, rows = await placed_in(api, "recovered", nodes)
                    assert "waited" not in rows["mute"], rows["mute"]
                    assert rows["mute"]["answered"] is True and rows["mute"]["value"] == 0.0
                    assert took < DEADLINE_MS / 1000 / 2
            finally:
                beating.cancel()
    finally:
        await nc.close()
