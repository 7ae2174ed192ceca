"""Policy versions live: a hub on an authenticated NATS server, enrolled agents, a version rolled
out to one node, promoted to all, rolled back; agents fetch the signed model in chunks, keep it
across a restart, and refuse what the hub did not sign."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from harness import (
    SecuredNats,
    enrol,
    running_agents,
    running_hub,
    secured_nats,
    wait_for,
    write_power_supply,
)

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.messages import PolicyAckV1, PolicyV1, Subjects, decode, encode
from edgeplane_contract.policy.signing import sign_policy, signed_text

from controlplane.bus.nats_auth import agent_inbox_prefix

pytest.importorskip("onnx")
from test_policies import BARE_METADATA, FP32, METADATA, body, constant_model

NODES = ["e1", "e2", "e3"]


@pytest.fixture
def secured(tmp_path: Path) -> Any:
    (tmp_path / "nats").mkdir()
    with secured_nats(tmp_path / "nats") as s:
        yield s


async def _enrol(running: Any, name: str) -> str:
    return (await enrol(running, name))[0]


@contextlib.asynccontextmanager
async def _agents(
    secured: SecuredNats,
    tmp_path: Path,
    seeds: dict[str, str],
    labels: dict[str, dict[str, str]] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    async with contextlib.AsyncExitStack() as stack:
        handles = {}
        for name, seed in seeds.items():
            (handle,) = await stack.enter_async_context(
                running_agents(
                    secured.url,
                    tmp_path,
                    [name],
                    nats_seed=seed,
                    inbox_prefix=agent_inbox_prefix("default", name),
                    hub_public_key=public_key_of(secured.hub_seed),
                    labels=(labels or {}).get(name, {}),
                )
            )
            handles[name] = handle
        yield handles


async def _running_on(api: Any, version: int) -> list[str]:
    return list((await api.get(f"/v1/policies/{version}"))["running_on"])


def _versions(handles: dict[str, Any]) -> dict[str, Any]:
    return {n: (h.agent.decider.policy_version, h.agent.policy.source) for n, h in handles.items()}


async def test_a_version_rolls_out_to_the_nodes_with_some_labels(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    labels = {"e1": {"tier": "canary", "site": "x"}, "e2": {"tier": "canary"}, "e3": {"tier": "main"}}
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seeds = {name: await _enrol(running, name) for name in NODES}
        async with _agents(secured, tmp_path, seeds, labels) as handles:
            status, _ = await api.call("POST", "/v1/policies", body(FP32, METADATA, description="fp32"))
            assert status == 201
            status, rollout = await api.call("POST", "/v1/policies/1/rollout", {"labels": {"tier": "canary"}})
            assert status == 200 and rollout["nodes"] == ["e1", "e2"], rollout
            await wait_for(lambda: _running_on(api, 1), lambda nodes: nodes == ["e1", "e2"], timeout=20)
            assert _versions(handles)["e3"] == (None, "onnx-int8")
            status, both = await api.call(
                "POST", "/v1/policies/1/rollout", {"labels": {"tier": "canary", "site": "x"}}
            )
            assert status == 200 and both["nodes"] == ["e1"], both  # every label must match
            status, none = await api.call("POST", "/v1/policies/1/rollout", {"labels": {"tier": "gold"}})
            assert status == 422 and none["error"]["field"] == "labels", none
            assert "tier=gold" in none["error"]["message"]
            status, two = await api.call(
                "POST", "/v1/policies/1/rollout", {"labels": {"tier": "canary"}, "percent": 50}
            )
            assert status == 422 and "exactly one of nodes, clusters, labels or percent" in str(two), two
            status, bad = await api.call("POST", "/v1/policies/1/rollout", {"labels": {"tier": 1}})
            assert status == 422 and bad["error"]["field"] == "labels", bad


async def test_a_version_rolls_out_to_one_node_is_promoted_to_all_and_rolled_back(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seeds = {name: await _enrol(running, name) for name in NODES}
        async with _agents(secured, tmp_path, seeds) as handles:
            assert _versions(handles) == {n: (None, "onnx-int8") for n in NODES}
            status, v1 = await api.call("POST", "/v1/policies", body(FP32, METADATA, description="fp32"))
            assert status == 201, v1

            # A canary of one node: it fetches the model (160 kB: several chunks) and decides
            # with it; the others keep the shipped model.
            status, rollout = await api.call("POST", "/v1/policies/1/rollout", {"nodes": ["e1"]})
            assert status == 200 and rollout == {"version": 1, "nodes": ["e1"], "changed": ["e1"]}, rollout
            await wait_for(lambda: _running_on(api, 1), lambda nodes: nodes == ["e1"], timeout=20)
            assert _versions(handles) == {
                "e1": (1, "onnx-fp32"),
                "e2": (None, "onnx-int8"),
                "e3": (None, "onnx-int8"),
            }
            assert (await api.get("/v1/nodes/e1"))["policy_version"] == 1
            assert (await api.get("/v1/nodes/e2"))["policy_version"] is None
            kept = tmp_path / "agents" / "e1" / "policy"
            assert json.loads((kept / "current.json").read_text()) == {"version": 1}
            assert hashlib.sha256((kept / "v1" / "model.onnx").read_bytes()).hexdigest() == v1["sha256"]
            metrics = await (await api.session.get(running.url + "/metrics")).text()
            assert 'edgeplane_node_policy_version{cluster="default",node="e1"} 1.0' in metrics
            assert 'edgeplane_node_policy_version{cluster="default",node="e2"} 0.0' in metrics

            # Promoted: every node runs it.
            status, promoted = await api.call("POST", "/v1/policies/v1/promote")
            assert status == 200 and promoted["state"] == "promoted", promoted
            await wait_for(lambda: _running_on(api, 1), lambda nodes: nodes == NODES, timeout=20)

            # A bad version on every node of the cluster, then rolled back: the fleet returns to v1.
            await api.call("POST", "/v1/policies", body(constant_model(64), BARE_METADATA, min_agreement=0))
            status, _ = await api.call("POST", "/v1/policies/2/rollout", {"clusters": ["default"]})
            assert status == 200
            await wait_for(lambda: _running_on(api, 2), lambda nodes: nodes == NODES, timeout=20)
            assert {h.agent.policy.source for h in handles.values()} == {"onnx-fp32"}  # unquantised
            status, back = await api.call("POST", "/v1/policies/2/rollback", {"reason": "declines all"})
            assert status == 200 and back["state"] == "rolled_back", back
            await wait_for(lambda: _running_on(api, 1), lambda nodes: nodes == NODES, timeout=20)
            status, again = await api.call("POST", "/v1/policies/2/rollout", {"nodes": ["e1"]})
            assert status == 409 and again["error"]["field"] == "version", again
            # Uploading it again makes it available again (the same model: the same version).
            status, revived = await api.call(
                "POST", "/v1/policies", body(constant_model(64), BARE_METADATA, min_agreement=0)
            )
            assert (status, revived["version"], revived["state"]) == (200, 2, "available"), revived

            # Rolling back the fleet's version returns every node to the model it shipped with.
            await api.call("POST", "/v1/policies/1/rollback")
            await wait_for(
                lambda: asyncio.sleep(0, _versions(handles)),
                lambda seen: seen == {n: (None, "onnx-int8") for n in NODES},
                timeout=20,
            )
            kinds = [e["kind"] for e in (await api.get("/v1/events?object_id=e1"))["items"]]
            # v1 (canary), v2, v1 again, shipped: promoting the version it ran already sent nothing.
            assert kinds.count("PolicyInstalled") == 4, kinds


async def test_a_restarted_agent_keeps_its_version_and_a_node_refuses_what_the_hub_did_not_sign(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seed = await _enrol(running, "e1")
        await api.call("POST", "/v1/policies", body(FP32, METADATA))
        await api.call("POST", "/v1/policies/1/promote")
        async with _agents(secured, tmp_path, {"e1": seed}) as handles:
            await wait_for(lambda: _running_on(api, 1), lambda nodes: nodes == ["e1"], timeout=20)
        async with _agents(secured, tmp_path, {"e1": seed}) as handles:
            # From its own disk, before any push: its first heartbeat already says v1.
            assert _versions(handles) == {"e1": (1, "onnx-fp32")}
            installed = [
                e
                for e in (await api.get("/v1/events?kind=PolicyInstalled"))["items"]
                if e["object_id"] == "e1"
            ]
            assert len(installed) == 1, installed

            # Someone else on the node's subject (the hub's connection stands in for a site's leaf
            # server here): an offer signed by another key, and one signed by the hub whose
            # chunk is not the model it names, are both refused; the node keeps v1.
            nc = await nats.connect(secured.url, nkeys_seed_str=secured.hub_seed)
            try:
                subject = Subjects(cluster="default").policy("e1")
                model = b"\x08\x07" * 100
                meta = b"{}"
                text = signed_text(
                    7, hashlib.sha256(model).hexdigest(), len(model), hashlib.sha256(meta).hexdigest(), 2
                )
                offer = PolicyV1(
                    version=7,
                    model_sha256=hashlib.sha256(model).hexdigest(),
                    model_size=len(model),
                    metadata_sha256=hashlib.sha256(meta).hexdigest(),
                    metadata_size=2,
                    signature=sign_policy(new_user_seed(), text),
                )
                ack = decode((await nc.request(subject, encode(offer), timeout=5)).data, PolicyAckV1)
                assert ack.state == "refused" and "not the hub's" in ack.reason, ack
                offer.signature = sign_policy(secured.hub_seed, text)
                ack = decode((await nc.request(subject, encode(offer), timeout=5)).data, PolicyAckV1)
                assert (ack.state, ack.part, ack.offset) == ("need", "model", 0), ack
                offer.part, offer.offset, offer.data = "model", 0, base64.b64encode(b"\x00" * 200).decode()
                ack = decode((await nc.request(subject, encode(offer), timeout=5)).data, PolicyAckV1)
                assert ack.state == "need" and ack.part == "metadata", ack
                offer.part, offer.offset, offer.data = "metadata", 0, base64.b64encode(meta).decode()
                ack = decode((await nc.request(subject, encode(offer), timeout=5)).data, PolicyAckV1)
                assert ack.state == "refused" and "does not match its signed checksum" in ack.reason, ack
            finally:
                await nc.close()
            assert _versions(handles) == {"e1": (1, "onnx-fp32")}


# A replica that needs its core to meet its SLA: quotas too small for it miss the SLA.
WORK = {"command": ["true"], "resources": {"cpu": 1, "memory": "128Mi"}, "sla_latency_s": 10}


async def _steady_work(api: Any, stop: asyncio.Event) -> int:
    """Workloads at about 10/s until ``stop``: each placement asks candidates for bids, which
    the agents' policies answer (and audit)."""
    posted = 0
    while not stop.is_set():
        status, _ = await api.call("POST", "/v1/workloads", {**WORK, "name": f"w{posted}"})
        assert status == 201
        posted += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.1)
    return posted


CANARY = {
    "steps": [25, 100],
    "dwell_s": 3,
    "sustain_s": 1,
    "threshold": 3,
    "min_samples": 5,
    "recent": 5,
    "window": 300,
    "baseline_floor": 0.01,
}


async def test_the_canary_controller_rolls_back_a_bad_version_and_promotes_a_good_one(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        seeds = {name: await _enrol(running, name) for name in ["e1", "e2", "e3", "e4"]}
        async with _agents(secured, tmp_path, seeds) as handles:
            stop = asyncio.Event()
            load = asyncio.create_task(_steady_work(api, stop))
            try:
                # A version that takes every offer with the smallest quotas: on these idle nodes
                # the objective would decline (waking a node for a 0.1-core job costs more energy
                # than it earns), so each of its decisions has regret; the shipped model's hardly.
                await api.call(
                    "POST", "/v1/policies", body(constant_model(0), BARE_METADATA, min_agreement=0)
                )
                status, started = await api.call("POST", "/v1/policies/1/canary", CANARY)
                assert status == 201 and started["state"] == "canary" and len(started["nodes"]) == 1, started
                status, busy = await api.call("POST", "/v1/policies/1/canary", CANARY)
                assert status == 409, busy
                bad = await wait_for(
                    lambda: api.get("/v1/policies/1/canary"), lambda c: c["state"] != "canary", timeout=40
                )
                assert bad["state"] == "rolled_back", bad
                rollback = bad["events"][-1]
                assert (
                    rollback["kind"] == "rollback"
                    and rollback["canary_score"] > 3 >= rollback["control_score"]
                )
                assert (await api.get("/v1/policies/1"))["state"] == "rolled_back"
                await wait_for(
                    lambda: asyncio.sleep(0, _versions(handles)),
                    lambda seen: all(v == (None, "onnx-int8") for v in seen.values()),
                    timeout=20,
                )

                # The fp32 export of the shipped network decides as the shipped model does:
                # stepped to every node and promoted.
                await api.call("POST", "/v1/policies", body(FP32, METADATA))
                status, _ = await api.call("POST", "/v1/policies/2/canary", CANARY)
                assert status == 201
                good = await wait_for(
                    lambda: api.get("/v1/policies/2/canary"), lambda c: c["state"] != "canary", timeout=60
                )
                assert good["state"] == "promoted", good
                assert [e["kind"] for e in good["events"]] == ["start", "step", "promote"], good["events"]
                assert good["samples"]["canary"] >= 5 and good["samples"]["control"] >= 5
                # The outcome guard counted finished work against its SLA (well within it here).
                assert sum(good["outcome_samples"].values()) > 0, good
                await wait_for(lambda: _running_on(api, 2), lambda nodes: nodes == sorted(seeds), timeout=20)
            finally:
                stop.set()
                await load
            kinds = [e["kind"] for e in (await api.get("/v1/events?object_id=1"))["items"]]
            assert "CanaryStarted" in kinds and "CanaryRolledBack" in kinds and "PolicyRolledBack" in kinds
            metrics = await (await api.session.get(running.url + "/metrics")).text()
            assert 'edgeplane_policy_canary_state{state="rolled_back",version="1"} 1.0' in metrics
            assert 'edgeplane_policy_canary_state{state="promoted",version="2"} 1.0' in metrics
            print("bad:", json.dumps(bad["events"]), "\ngood:", json.dumps(good["events"]))


async def test_the_energy_guard_rolls_back_a_canary_whose_nodes_drain_their_batteries(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    """Real agents on battery (their power-supply trees are the one mocked part: the test sets the
    levels). A version that decides as the shipped model does, so regret and SLA say nothing; the
    canary's nodes lose charge 4x as fast as the control's: the energy guard rolls it back."""
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        names = ["e1", "e2", "e3", "e4"]
        seeds = {name: await _enrol(running, name) for name in names}
        async with _agents(secured, tmp_path, seeds):
            level = dict.fromkeys(names, 100.0)
            for name in names:
                write_power_supply(tmp_path / f"power-{name}", on_battery=True, percent=100.0)
            await api.call("POST", "/v1/policies", body(FP32, METADATA))
            rules = {**CANARY, "steps": [50, 100], "dwell_s": 120, "threshold": 0.5, "min_samples": 3}
            status, started = await api.call(
                "POST",
                "/v1/policies/1/canary",
                {**rules, "recent": 3, "drain_window_s": 0.5, "drain_span_s": 3},
            )
            assert status == 201 and len(started["nodes"]) == 2, started
            canary_nodes = set(started["nodes"])
            await wait_for(lambda: _running_on(api, 1), lambda nodes: set(nodes) == canary_nodes, timeout=20)
            status_now: dict[str, Any] = started
            for tick in range(160):  # 40 s at most
                for name in names:
                    if name in canary_nodes or tick % 4 == 0:  # 4 %/s on the canary, 1 %/s elsewhere
                        level[name] -= 1.0
                    write_power_supply(tmp_path / f"power-{name}", on_battery=True, percent=level[name])
                await asyncio.sleep(0.25)
                status_now = await api.get("/v1/policies/1/canary")
                if status_now["state"] != "canary":
                    break
            assert status_now["state"] == "rolled_back", status_now
            reason = status_now["events"][-1]["reason"]
            assert reason.startswith("battery drain: canary score"), status_now["events"]
            assert status_now["drain_samples"]["canary"] >= 3 and status_now["drain_samples"]["control"] >= 3
            assert status_now["drain_scores"]["canary"] > 0.5 >= status_now["drain_scores"]["control"]
            print("energy guard:", json.dumps(status_now["events"]), status_now["drain_scores"])


async def test_the_energy_guard_rolls_back_a_canary_whose_workloads_draw_more_per_vcpu(
    secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    """Real agents on battery whose batteries report their discharge (the one mocked part): the
    canary's nodes draw 30 W, the control's 10 W. Workloads of half a vCPU run on every node; each one
    that ends is a sample of its node's group: its share of the node's draw per requested vCPU.
    Regret and SLA say nothing; the energy-per-workload guard rolls the version back, and each
    workload's energy is in its PlacementSucceeded event."""
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        names = ["e1", "e2", "e3", "e4"]
        seeds = {name: await _enrol(running, name) for name in names}
        async with _agents(secured, tmp_path, seeds):
            for name in names:
                write_power_supply(tmp_path / f"power-{name}", on_battery=True, percent=90.0, power_w=10.0)
            await api.call("POST", "/v1/policies", body(FP32, METADATA))
            rules = {**CANARY, "steps": [50, 100], "dwell_s": 120, "threshold": 0.5, "min_samples": 3}
            status, started = await api.call("POST", "/v1/policies/1/canary", {**rules, "recent": 3})
            assert status == 201 and len(started["nodes"]) == 2, started
            canary_nodes = set(started["nodes"])
            for name in canary_nodes:
                write_power_supply(tmp_path / f"power-{name}", on_battery=True, percent=90.0, power_w=30.0)
            await wait_for(lambda: _running_on(api, 1), lambda nodes: set(nodes) == canary_nodes, timeout=20)
            status_now: dict[str, Any] = started
            submitted: list[str] = []
            for tick in range(80):  # 40 s at most
                if tick % 2 == 0:  # one on each node (the scheduler would pack them on one or two)
                    for name in names:
                        spec = {
                            "name": f"w{tick}-{name}",
                            "command": ["sleep", "0.6"],
                            "resources": {"cpu": 0.5},
                            "affinity": {"nodes": [name]},
                        }
                        submitted.append(await api.post_workload(spec))
                await asyncio.sleep(0.5)
                status_now = await api.get("/v1/policies/1/canary")
                if status_now["state"] != "canary":
                    break
            assert status_now["state"] == "rolled_back", json.dumps(status_now)
            reason = status_now["events"][-1]["reason"]
            assert reason.startswith("energy per workload: canary score"), status_now["events"]
            assert (
                status_now["energy_samples"]["canary"] >= 3 and status_now["energy_samples"]["control"] >= 3
            )
            assert status_now["energy_scores"]["canary"] > 0.5 >= status_now["energy_scores"]["control"]
            events = (await api.get(f"/v1/events?object_id={submitted[0]}"))["items"]
            ended = [e for e in events if e["kind"] == "PlacementSucceeded"]
            assert ended and ended[0]["data"]["energy_method"] == "battery", events
            assert ended[0]["data"]["energy_j"] > 0, ended
            print("energy guard:", json.dumps(status_now["events"]), status_now["energy_scores"])


async def test_a_running_canary_is_resumed_by_the_next_hub_on_the_store(
    secured: SecuredNats, sqlite_url: str
) -> None:
    """The hub running a canary stops (a restart; on PostgreSQL, a standby taking over): the next
    hub on the store goes on with it from where it was, instead of forgetting it."""
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (_, api):
        status, created = await api.call("POST", "/v1/policies", body(FP32, METADATA))
        assert status == 201, created
        status, started = await api.call(
            "POST", "/v1/policies/1/canary", {"steps": [50, 100], "dwell_s": 600}
        )
        assert status == 201 and started["state"] == "canary", started
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (_, api):
        # Its start is kept before the 201: even a hub that stopped before the first share leaves it.
        resumed = await wait_for(lambda: api.get("/v1/policies/1/canary"), lambda c: len(c["events"]) >= 1)
        assert resumed["state"] == "canary", resumed
        assert [e["kind"] for e in resumed["events"]] == ["start"] and resumed["fraction"] == 0.5
        assert resumed["events"][0]["t_s"] == 0.0  # its timeline counts from its first start
        status, busy = await api.call("POST", "/v1/policies/1/canary", {"steps": [100]})
        assert status == 409, busy  # the resumed canary is the one running
        status, _ = await api.call("POST", "/v1/policies/1/rollback", {"reason": "enough"})
        assert status == 200
