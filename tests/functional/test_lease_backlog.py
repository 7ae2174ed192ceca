"""A hub behind on its intake does not blame the nodes: heartbeats it has received but not yet read
(waiting in its subscription's queue) are read before a lease is declared expired."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import nats
from harness import register_fake, running_hub, wait_for

from edgeplane_contract.messages import HeartbeatV1, Subjects, Telemetry, encode

TELEMETRY = Telemetry(cpu_percent=1, memory_used_bytes=1, memory_total_bytes=2**34)


async def _heartbeats(nc: nats.NATS, subjects: Subjects, name: str, boot: str) -> None:
    seq = 0
    while True:  # cancelled by the test
        seq += 1
        hb = HeartbeatV1(node=name, boot_id=boot, seq=seq, sent_at=time.time(), telemetry=TELEMETRY)
        await nc.publish(subjects.heartbeat(name), encode(hb))
        await asyncio.sleep(0.2)


async def test_heartbeats_waiting_unread_in_the_hub_do_not_make_their_node_not_ready(nats_server, sqlite_url):
    # register_fake's node heartbeats every 0.2 s; the harness's lease is 4 of them: 0.8 s.
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        hub = running.hub
        nc = await nats.connect(nats_server.url)
        sender: asyncio.Task[None] | None = None
        try:
            subjects = Subjects("default")
            boot = uuid.uuid4().hex
            await register_fake(nc, subjects, "backlog", boot, TELEMETRY)
            sender = asyncio.create_task(_heartbeats(nc, subjects, "backlog", boot))
            await wait_for(api.nodes, lambda nodes: [n["status"] for n in nodes] == ["Ready"])

            # The hub's heartbeat handling stops for 1.4 s (longer than the lease) while its loop
            # stays free: the node's heartbeats keep arriving and wait unread in the queue.
            reading = asyncio.Event()
            reading.set()
            handle = hub.handle_heartbeat

            async def held(node: str, msg: HeartbeatV1) -> None:
                await reading.wait()
                await handle(node, msg)

            hub.handle_heartbeat = held  # type: ignore[method-assign]
            reading.clear()
            await asyncio.sleep(0.7)
            assert hub.bus.unread_heartbeats() > 0
            await asyncio.sleep(0.7)
            reading.set()
            await asyncio.sleep(1.0)

            assert [n["status"] for n in await api.nodes()] == ["Ready"]
            events = (await api.get("/v1/events?object_id=backlog"))["items"]
            assert not [e for e in events if e["kind"] == "NodeNotReady"], events
        finally:
            if sender is not None:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            await nc.close()
