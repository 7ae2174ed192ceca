"""A registration storm is admitted at a bounded pace: beyond the registrations it handles at once,
the hub answers "come back in N s" (``RegisterAckV1.retry_after_s``) and the agent does, with
jitter. Real nats-server, real hub on SQLite, a real agent."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from harness import register_message, running_agents, running_hub, wait_for
from nats.aio.msg import Msg

from edgeplane_contract.messages import RegisterAckV1, Subjects, decode, encode

from controlplane.bus import hub_bus
from controlplane.natsd import NatsServer
from edge_agent.registration import RETRY_AFTER_JITTER, retry_delay

pytestmark = [pytest.mark.timeout(60)]

SUBJECTS = Subjects(cluster="default")


async def test_a_storm_beyond_the_hubs_bound_is_told_when_to_come_back_and_every_node_gets_in(
    nats_server: NatsServer, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_bus, "REGISTER_IN_FLIGHT", 4)  # read by the bus when it starts
    names = [f"storm-{i:02d}" for i in range(40)]
    turns: list[float] = []  # each deferral's turn, on this process's clock
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        nc = await nats.connect(nats_server.url)
        try:

            async def register(name: str) -> None:
                payload = encode(register_message(name, heartbeat_s=5.0))
                while True:
                    reply = await nc.request(SUBJECTS.register(name), payload, timeout=10)
                    ack = decode(reply.data, RegisterAckV1)
                    if ack.accepted:
                        assert ack.retry_after_s is None and ack.keep == []
                        return
                    assert ack.retry_after_s is not None and ack.retry_after_s >= 0, ack
                    turns.append(time.monotonic() + ack.retry_after_s)
                    await asyncio.sleep(retry_delay(ack.retry_after_s))

            began = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*(register(name) for name in names)), timeout=40)
            took = time.monotonic() - began
        finally:
            await nc.close()
        nodes = await wait_for(api.nodes, lambda items: len(items) == len(names))
        assert {n["name"] for n in nodes} == set(names) and {n["status"] for n in nodes} == {"Ready"}
        # Beyond the 4 at once the others were deferred, to turns one slot of the rate apart (not
        # one wave): at least 32 deferrals span at least 31 slots, however spread out in time
        # they arrived (turns are absolute; a few slots spare for this process's receive lag).
        assert running.hub.bus.register_deferred == len(turns) >= len(names) - 4 - 4
        slot = 1.0 / running.hub.bus.admission_pace.rate
        assert max(turns) - min(turns) >= 28 * slot, sorted(turns)
        assert took < 30, took


async def test_an_agent_told_to_come_back_later_does_so_after_the_hubs_turn_not_its_backoff(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A scripted hub on the real server answers the first registration "retry in 1 s", the
    second "accepted": the agent waits the hub's second (with its jitter), and counts a deferral,
    not a refusal."""
    asked: list[float] = []
    nc = await nats.connect(nats_server.url)

    async def hub(msg: Msg) -> None:
        asked.append(time.monotonic())
        if len(asked) == 1:
            ack = RegisterAckV1(accepted=False, reason="busy", hub_id="scripted", retry_after_s=1.0)
        else:
            ack = RegisterAckV1(accepted=True, hub_id="scripted", keep=[])
        await msg.respond(encode(ack))

    await nc.subscribe(SUBJECTS.register("patient"), cb=hub)
    await nc.flush()
    try:
        async with running_agents(nats_server.url, tmp_path, ["patient"], wait_registered=False) as agents:
            agent = agents[0].agent
            await asyncio.wait_for(agent.registered.wait(), timeout=15)
    finally:
        await nc.close()
    assert len(asked) == 2
    low, high = RETRY_AFTER_JITTER
    assert low * 1.0 - 0.05 <= asked[1] - asked[0] <= high * 1.0 + 1.0, asked
    assert agent.counters["register_deferred"] == 1 and agent.counters["register_refused"] == 0
