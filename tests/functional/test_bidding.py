"""The bid round: candidate nodes' local policies answer; the hub falls back on silence."""

from __future__ import annotations

import asyncio
import time
import uuid

import nats
from harness import register_fake, running_agents, running_hub, wait_for

from edgeplane_contract.messages import (
    BidRequestV1,
    HeartbeatV1,
    Subjects,
    Telemetry,
    decode,
    encode,
)


async def test_local_policies_bid_and_the_decision_is_explained(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["b1", "b2"]) as agents,
    ):
        await wait_for(api.nodes, lambda n: all(x["telemetry"].get("policy") for x in n) and len(n) == 2)
        workload_id = await api.post_workload(
            {
                "name": "bid-me",
                "command": ["true"],
                "kind": "service",
                "resources": {"cpu": 1, "memory": "256Mi"},
            }
        )
        done = await api.wait_status(workload_id, "Succeeded")
        placement = await api.get(f"/v1/workloads/{workload_id}/placement")
        bids = placement["decisions"][0]["explanation"]["bids"]
        assert bids["winner"] == done["node"]
        answered = [c for c in bids["candidates"] if c["answered"]]
        assert answered, bids
        assert all(c["source"] in ("onnx-int8", "heuristic") and 0 <= c["action"] <= 64 for c in answered)
        assert sum(a.agent.counters["bids"] for a in agents) >= 1
        collected = {
            a.agent.config.name: await api.get(f"/v1/nodes/{a.agent.config.name}/decisions") for a in agents
        }
        entries = [e for body in collected.values() for e in body["entries"]]
        assert entries and all(body["epsilon"] == 0.1 for body in collected.values())
        raw = {e.request_id: e.expected_reward for a in agents for e in a.agent.decisions.entries}
        assert all(e["expected_reward"] != raw[e["request_id"]] for e in entries), (
            "rewards leave the node noised"
        )


async def test_a_node_that_does_not_answer_in_time_is_valued_at_the_hubs_estimate(
    nats_server, sqlite_url, tmp_path
):
    """A fake node registers with a local policy but answers bids too late; placement goes on."""
    nc = await nats.connect(nats_server.url)
    subjects = Subjects("default")
    slow_asked = asyncio.Event()

    async def slow_bid(msg) -> None:
        decode(msg.data, BidRequestV1)
        slow_asked.set()
        await asyncio.sleep(1.0)  # far past the 50 ms deadline

    await nc.subscribe(subjects.bid("slow"), cb=slow_bid)
    telemetry = Telemetry(cpu_percent=1, memory_used_bytes=1, memory_total_bytes=2**34, policy="onnx-int8")
    boot = uuid.uuid4().hex

    async def heartbeats() -> None:
        seq = 0
        while True:
            seq += 1
            hb = HeartbeatV1(node="slow", boot_id=boot, seq=seq, sent_at=time.time(), telemetry=telemetry)
            await nc.publish(subjects.heartbeat("slow"), encode(hb))
            await asyncio.sleep(0.2)

    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            await register_fake(nc, subjects, "slow", boot, telemetry)
            beating = asyncio.create_task(heartbeats())
            try:
                async with running_agents(nats_server.url, tmp_path, ["quick"]):
                    started = time.monotonic()
                    workload_id = await api.post_workload(
                        {
                            "name": "bid-fallback",
                            "command": ["true"],
                            "affinity": {"nodes": ["quick", "slow"]},
                        }
                    )
                    placed = await wait_for(
                        lambda: api.get(f"/v1/workloads/{workload_id}/placement"),
                        lambda p: bool(p["decisions"]),
                    )
                    assert time.monotonic() - started < 5
                    assert slow_asked.is_set()
                    candidates = {
                        c["node"]: c for c in placed["decisions"][0]["explanation"]["bids"]["candidates"]
                    }
                    assert candidates["slow"]["answered"] is False
                    assert candidates["slow"]["hub_reward"] is not None
                    assert candidates["slow"]["value"] == candidates["slow"]["hub_reward"]
                    assert candidates["quick"]["answered"] is True
            finally:
                beating.cancel()
    finally:
        await nc.close()


async def test_bids_are_ranked_by_the_value_of_the_quotas_the_hub_places(nats_server, sqlite_url):
    """Two fake nodes accept. "greedy" values its own chosen bin highly but the requested quotas
    poorly; "fit" values the requested quotas best; "legacy" (an older agent) sends no
    ``score_requested`` and is ranked by ``score``. The hub places by the value as placed."""
    from edgeplane_contract.messages import BidV1

    nc = await nats.connect(nats_server.url)
    subjects = Subjects("default")
    answers = {
        "greedy": {"score": 0.9, "score_requested": 0.1},
        "fit": {"score": 0.5, "score_requested": 0.5},
        "legacy": {"score": 0.3},
    }
    telemetry = Telemetry(cpu_percent=1, memory_used_bytes=1, memory_total_bytes=2**34, policy="onnx-int8")
    boots = {name: uuid.uuid4().hex for name in answers}

    def answerer(name: str):
        async def answer(msg) -> None:
            request = decode(msg.data, BidRequestV1)
            bid = BidV1(request_id=request.request_id, node=name, accept=True, action=40, **answers[name])
            await msg.respond(encode(bid))

        return answer

    async def heartbeats() -> None:
        seq = 0
        while True:
            seq += 1
            for name, boot in boots.items():
                hb = HeartbeatV1(node=name, boot_id=boot, seq=seq, sent_at=time.time(), telemetry=telemetry)
                await nc.publish(subjects.heartbeat(name), encode(hb))
            await asyncio.sleep(0.2)

    for name in answers:
        await nc.subscribe(subjects.bid(name), cb=answerer(name))
    try:
        async with running_hub(nats_server.url, sqlite_url) as (_, api):
            for name, boot in boots.items():
                await register_fake(nc, subjects, name, boot, telemetry)
            beating = asyncio.create_task(heartbeats())
            try:
                workload_id = await api.post_workload({"name": "rank-me", "command": ["true"]})
                placed = await wait_for(
                    lambda: api.get(f"/v1/workloads/{workload_id}/placement"),
                    lambda p: bool(p["decisions"]),
                )
                bids = placed["decisions"][0]["explanation"]["bids"]
                candidates = {c["node"]: c for c in bids["candidates"]}
                assert set(candidates) == set(answers), bids
                assert bids["winner"] == "fit" and bids["decided_by"] == "bid"
                assert candidates["greedy"]["value"] == 0.1 and candidates["greedy"]["score"] == 0.9
                legacy = candidates["legacy"]
                assert legacy["value"] == 0.3 and legacy["score_requested"] is None
            finally:
                beating.cancel()
    finally:
        await nc.close()


async def test_every_replica_of_a_workload_gets_its_own_bid_round(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["m1", "m2"]) as agents,
    ):
        await wait_for(api.nodes, lambda n: all(x["telemetry"].get("policy") for x in n) and len(n) == 2)
        workload_id = await api.post_workload(
            {"name": "three", "command": ["true"], "replicas": 3, "resources": {"cpu": 0.5, "memory": "64Mi"}}
        )
        await api.wait_status(workload_id, "Succeeded")
        placement = await api.get(f"/v1/workloads/{workload_id}/placement")
        rounds = [d["explanation"]["bids"] for d in placement["decisions"]]
        assert len(rounds) == 3 and all(r["candidates"] for r in rounds)
        assert all(any(c["answered"] for c in r["candidates"]) for r in rounds)
        asked = {e.request_id for a in agents for e in a.agent.decisions.entries}
        assert len(asked) >= 3  # one request id per replica's round
