"""Power source changes reach the hub within a heartbeat, with the node's energy weight."""

from __future__ import annotations

from harness import running_agents, running_hub, wait_for, write_power_supply


async def test_going_on_battery_raises_w3_in_the_node_record_and_mains_restores_it(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["p1"], heartbeat_interval_s=0.3) as agents,
    ):
        mains = await wait_for(lambda: api.get("/v1/nodes/p1"), lambda n: bool(n["weights"]))
        assert mains["power"] == {"source": "mains", "battery_percent": 80.0}
        assert mains["weights"] == {"w1": 1.0, "w2": 2.0, "w3": 1.0, "w4": 4.0}

        write_power_supply(agents[0].power_dir, on_battery=True, percent=80)
        high = await wait_for(
            lambda: api.get("/v1/nodes/p1"), lambda n: n["power"]["source"] == "battery", timeout=3
        )
        # 1.0 * 4 (battery) * (1 + 3 * (1 - 0.8)) = 6.4
        assert high["weights"]["w3"] == 6.4

        write_power_supply(agents[0].power_dir, on_battery=True, percent=20)
        low = await wait_for(
            lambda: api.get("/v1/nodes/p1"), lambda n: n["power"]["battery_percent"] == 20.0, timeout=3
        )
        assert low["weights"]["w3"] == 13.6 > high["weights"]["w3"]

        write_power_supply(agents[0].power_dir, on_battery=False, percent=25)
        back = await wait_for(
            lambda: api.get("/v1/nodes/p1"), lambda n: n["power"]["source"] == "mains", timeout=3
        )
        assert back["weights"]["w3"] == 1.0


async def test_on_low_battery_the_agents_bid_for_the_same_offer_changes(nats_server, tmp_path):
    """A real agent over real NATS: the same analytics offer, on mains and then on 20% battery."""
    import nats

    from edgeplane_contract.messages import BidRequestV1, BidV1, OfferSpec, Subjects, decode, encode

    offer = OfferSpec(cpu=4.0, memory=8 * 2**30, kind="analytics", runtime_s=300.0, sla_s=720.0)
    async with running_agents(
        nats_server.url, tmp_path, ["edge-b"], cpu=8.0, memory=16 * 2**30, wait_registered=False
    ) as agents:
        await wait_for(lambda: _policy_loaded(agents[0]), bool, timeout=10)
        nc = await nats.connect(nats_server.url)
        try:

            async def ask() -> BidV1:
                request = BidRequestV1(request_id="r", workload_id="w", replica=0, offer=offer)
                reply = await nc.request(Subjects("default").bid("edge-b"), encode(request), timeout=5)
                return decode(reply.data, BidV1)

            on_mains = await ask()
            write_power_supply(agents[0].power_dir, on_battery=True, percent=20)
            on_battery = await ask()
        finally:
            await nc.close()
    assert on_mains.weights[2] == 1.0 and on_battery.weights[2] == 13.6
    assert on_mains.source == on_battery.source == "onnx-int8"
    assert (on_battery.action, on_battery.accept) != (on_mains.action, on_mains.accept)
    assert on_battery.score < on_mains.score


async def _policy_loaded(handle) -> bool:
    return handle.agent.policy is not None and handle.agent._nc is not None
