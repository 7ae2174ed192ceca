"""An invocation sent during a NATS outage waits for its nodes to come back, not only for the hub.

The agent reaches the nats-server through a relay the test holds cut for a while after the
server is back: the hub reconnects first, and its agent a little later, as happens when the
agents' reconnect backoff is longer than the hub's.
"""

from __future__ import annotations

import asyncio

import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for
from tcp_cut import CuttableRelay

from controlplane.natsd import NatsServer, free_port


async def _async(value: object) -> object:
    return value


# 1 s: the agent is back within its leases; 3.5 s: beyond 3 of its 1 s leases (it went NotReady
# meanwhile), within the 5 s floor (REREGISTER_MIN_S): a loaded machine's slow reconnect.
@pytest.mark.parametrize("agent_back_after_s", [1.0, 3.5])
async def test_an_invocation_sent_during_an_outage_waits_for_the_agent_that_reconnects_after_the_hub(
    sqlite_url, tmp_path, agent_back_after_s
):
    """Was: 503 ``no_capacity`` the instant the hub reconnected (no agent answered yet). Now it
    waits, within its budget and a few leases (at least 5 s), for the node to be heard again, and
    runs once."""
    port = free_port()
    server = NatsServer(port=port).start()
    relay = await CuttableRelay("127.0.0.1", port).start()
    source = "def handle(event, context):\n    return {'got': event}\n"
    try:
        async with (
            running_hub(server.url, sqlite_url) as (running, api),
            running_agents(relay.url, tmp_path, ["r1"], **PYTHON_FUNCTIONS),
        ):
            body = {"name": "echo", "source": source, "handler": "handle", "timeout_s": 10}
            assert (await api.call("POST", "/v1/functions", body))[0] == 201
            assert (await api.call("POST", "/v1/functions/echo/invoke", 1))[0] == 200
            bus = running.hub.bus
            server.stop()
            relay.cut()  # the agent stays cut off after the server is back
            await wait_for(lambda: _async(bus.hearing_since("default") is None), bool)
            call = asyncio.ensure_future(api.call("POST", "/v1/functions/echo/invoke", 2, timeout_s=30))
            await asyncio.sleep(0.5)
            server = NatsServer(port=port).start()
            await wait_for(lambda: _async(bus.hearing_since("default") is not None), bool, timeout=15)
            await asyncio.sleep(agent_back_after_s)  # the hub hears again; its agent does not yet
            assert not call.done(), f"answered before the agent was back: {call.result()}"
            relay.heal()
            status, answer = await asyncio.wait_for(call, timeout=25)
            assert (status, answer) == (200, {"got": 2})
            stats = await api.get("/v1/functions/echo")
            assert stats["stats"]["invocations"] == 2, stats
    finally:
        await relay.close()
        server.stop()
