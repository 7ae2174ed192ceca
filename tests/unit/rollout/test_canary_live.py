"""The live canary's guards (controlplane/policies/canary_live.py) on a real SQLite store: work on
the canary's nodes finishing far over its SLA, or their batteries draining far faster than the
control group's, rolls the version back even while the decisions' regret says nothing is wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.fleet.nodes import NodeLive
from controlplane.policies.canary_live import LiveCanary
from controlplane.policies.registry import PolicyRegistry
from controlplane.rollout.controller import RolloutConfig
from controlplane.store.db import sqlite_url
from controlplane.store.models import PolicyRow
from controlplane.store.store import Store


class StandInHub:
    def __init__(self) -> None:
        self.nodes = {name: NodeLive(name, "c", "Ready", "b", 3.0, 0.0) for name in ("n1", "n2", "n3", "n4")}
        self.policy_regret_listeners: list[Any] = []
        self.placement_outcome_listeners: list[Any] = []
        self.power_listeners: list[Any] = []
        self.energy_listeners: list[Any] = []


async def _store_with_a_version(tmp_path: Path) -> Store:
    """A real SQLite store holding policy v1 (available)."""
    store = await Store.open(sqlite_url(tmp_path / "db.sqlite3"))
    async with store.session() as s:
        s.add(
            PolicyRow(
                sha256="a" * 64, size=1, model=b"x", meta={}, description="", evaluation={},
                created_at=time.time(), created_by="t", state="available",
            )
        )  # fmt: skip
    return store


def _half_then_all(
    registry: PolicyRegistry,
    hub: StandInHub,
    now: list[float],
    *,
    dwell_s: float,
    sustain_s: float,
    **kw: float,
) -> LiveCanary:
    """Version 1's canary: half the nodes, then all; quick to judge (5 samples, threshold 0.5)."""
    config = RolloutConfig(
        steps=(0.5, 1.0), dwell_s=dwell_s, sustain_s=sustain_s, threshold=0.5, min_samples=5, recent=5
    )
    return LiveCanary(
        version=1, config=config, registry=registry, hub=hub, wake=lambda: None, by="t",
        clock=lambda: now[0], **kw,
    )  # fmt: skip


async def test_outcomes_far_over_their_sla_on_canary_nodes_roll_the_version_back(tmp_path: Path) -> None:
    store = await _store_with_a_version(tmp_path)
    try:
        registry = PolicyRegistry(store)
        hub = StandInHub()
        now = [0.0]
        canary = _half_then_all(registry, hub, now, dwell_s=60, sustain_s=2)
        await canary.tick()  # the start: half the nodes assigned
        assert sorted(await registry.assignments()) == canary.nodes and len(canary.nodes) == 2
        for name in canary.nodes:
            hub.nodes[name].policy_version = 1
        for step in range(40):
            now[0] = step * 0.25
            for name, live in hub.nodes.items():
                canary.observe(live, 0.0)  # the decisions look fine
                canary.observe_outcome(name, 2.5 if name in canary.nodes else 0.3)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", canary.describe()
        described = canary.describe()
        assert described["events"][-1]["reason"].startswith("outcomes against SLA: canary score")
        assert described["outcome_scores"]["canary"] > 0.5 >= described["outcome_scores"]["control"]
        assert (await registry.get(1)).state == "rolled_back" and await registry.assignments() == {}
    finally:
        await store.close()


async def test_a_canary_goes_on_from_its_step_after_the_hub_restarts(tmp_path: Path) -> None:
    """The canary reached its second step; the hub stops (its controller with it) and a new one
    starts on the store: the canary goes on from that step, its timeline and nodes as they were,
    and promotes after the step's dwell, judged on samples seen after the restart only."""
    from controlplane.policies.canary_live import CanaryRollouts
    from controlplane.store.models import PolicyCanaryRow

    store = await _store_with_a_version(tmp_path)
    try:
        registry = PolicyRegistry(store)
        hub = StandInHub()
        now = [0.0]
        config = RolloutConfig(
            steps=(0.25, 0.5, 1.0), dwell_s=5, sustain_s=2, threshold=3, min_samples=3, recent=3
        )
        first = LiveCanary(
            version=1,
            config=config,
            registry=registry,
            hub=hub,
            wake=lambda: None,
            by="op",
            clock=lambda: now[0],
        )

        async def feed(canary: LiveCanary, until: float) -> None:
            while now[0] < until and canary.state == "canary":
                now[0] += 0.5
                for name, live in hub.nodes.items():
                    live.policy_version = 1 if name in canary.nodes else None
                    canary.observe(live, 0.0)
                await canary.tick()

        await first.tick()
        await feed(first, 6.0)  # past the first dwell: the second step (50%)
        assert (first.state, first.fraction, len(first.nodes)) == ("canary", 0.5, 2), first.describe()
        async with store.session() as s:
            kept = await s.get(PolicyCanaryRow, 1)
            assert kept is not None and (kept.state, kept.step, kept.fraction) == ("canary", 1, 0.5)
            assert [e["kind"] for e in kept.events] == ["start", "step"] and kept.nodes == first.nodes

        # A new hub on the store (a restart, or a standby that took over).
        rollouts = CanaryRollouts(registry, hub, lambda: None, clock=lambda: now[0])
        resumed = await rollouts.resume()
        assert resumed is not None and rollouts.active() is resumed
        await rollouts.close()  # its own task stops: the test ticks it by hand from here
        assert (resumed.state, resumed.fraction, resumed.nodes) == ("canary", 0.5, first.nodes)
        assert [e["kind"] for e in resumed.describe()["events"]] == ["start", "step"]
        assert resumed.controller.samples == {"canary": 0, "control": 0}  # judged afresh
        assert resumed.controller.step == 1
        await feed(resumed, 20.0)
        assert resumed.state == "promoted", resumed.describe()
        assert [e["kind"] for e in resumed.describe()["events"]] == ["start", "step", "step", "promote"]
        async with store.session() as s:
            done = await s.get(PolicyCanaryRow, 1)
            assert done is not None and done.state == "promoted" and len(done.events) == 4
        later = CanaryRollouts(registry, hub, lambda: None)
        assert await later.resume() is None  # nothing left to resume
        ended = await later.describe(1)  # what a later hub answers for it: the kept timeline
        assert ended["state"] == "promoted" and [e["kind"] for e in ended["events"]][-1] == "promote"
        assert ended["nodes"] == resumed.nodes and ended["samples"] == {"canary": 0, "control": 0}
        assert (await registry.get(1)).state == "promoted"
    finally:
        await store.close()


Feed = Callable[[LiveCanary, int, str, NodeLive], None]


async def _guarded_run(tmp_path: Path, seconds: int, feed: Feed, **kw: float) -> LiveCanary:
    """Version 1's canary on half the nodes, ticked each second for ``seconds`` while ``feed``
    gives it each node's samples of that second (the decisions' regret always 0: they look fine),
    until it ends."""
    store = await _store_with_a_version(tmp_path)
    try:
        registry = PolicyRegistry(store)
        hub = StandInHub()
        now = [0.0]
        canary = _half_then_all(registry, hub, now, dwell_s=600, sustain_s=5, **kw)
        await canary.tick()
        for name in canary.nodes:
            hub.nodes[name].policy_version = 1
        for second in range(seconds):
            now[0] = float(second)
            for name, live in hub.nodes.items():
                canary.observe(live, 0.0)
                feed(canary, second, name, live)
            await canary.tick()
            if canary.state != "canary":
                break
        return canary
    finally:
        await store.close()


async def _drain_run(tmp_path: Path, canary_pct_per_s: float, control_pct_per_s: float) -> LiveCanary:
    """Every node on battery, heartbeats each second; the canary's and the control's nodes lose
    charge at the given rates (the battery is the part that cannot run here: its level is
    scripted, what the canary does with the heartbeats is real)."""

    def feed(canary: LiveCanary, second: int, name: str, live: NodeLive) -> None:
        rate = canary_pct_per_s if name in canary.nodes else control_pct_per_s
        level = max(0.0, 100.0 - rate * second)
        canary.observe_power(live, "battery", float(int(level)))  # whole percents, as sysfs

    return await _guarded_run(tmp_path, 300, feed, drain_window_s=5.0, drain_span_s=60.0)


async def test_a_canary_whose_nodes_drain_their_batteries_is_rolled_back(tmp_path: Path) -> None:
    # The canary's nodes lose 0.2 %/s (720 %/h), the control's 0.05 %/s: 4x.
    canary = await _drain_run(tmp_path, 0.2, 0.05)
    assert canary.state == "rolled_back", canary.describe()
    described = canary.describe()
    assert described["events"][-1]["reason"].startswith("battery drain: canary score")
    assert described["drain_scores"]["canary"] > 0.5 >= described["drain_scores"]["control"]
    assert described["drain_samples"]["canary"] >= 5 and described["drain_samples"]["control"] >= 5


async def test_a_drain_the_whole_fleet_shares_does_not_roll_the_canary_back(tmp_path: Path) -> None:
    # Night falls on every node alike: the canary drains as the control does, nothing to blame.
    canary = await _drain_run(tmp_path, 0.1, 0.1)
    assert canary.state != "rolled_back", canary.describe()
    assert canary.describe()["drain_samples"]["canary"] >= 5


async def _energy_run(tmp_path: Path, canary_w_per_vcpu: float, control_w_per_vcpu: float) -> LiveCanary:
    """Four placements end Succeeded on every node each second, at the given mean draw per
    requested vCPU on the canary's nodes and on the control's (what the hub's energy meter gives
    the listeners: ``tests/unit/spine/test_energy_meter.py``), with a little spread."""

    def feed(canary: LiveCanary, second: int, name: str, live: NodeLive) -> None:
        mean = canary_w_per_vcpu if name in canary.nodes else control_w_per_vcpu
        for k in range(4):
            canary.observe_energy(name, mean * (0.9 + 0.05 * k), f"w-{second}-{k}")

    return await _guarded_run(tmp_path, 120, feed)


async def test_a_canary_whose_workloads_draw_more_per_vcpu_is_rolled_back(tmp_path: Path) -> None:
    # The canary's nodes draw 3x the control's per requested vCPU for the same work.
    canary = await _energy_run(tmp_path, 60.0, 20.0)
    assert canary.state == "rolled_back", canary.describe()
    described = canary.describe()
    assert described["events"][-1]["reason"].startswith("energy per workload: canary score")
    assert described["energy_scores"]["canary"] > 0.5 >= described["energy_scores"]["control"]
    assert described["energy_samples"]["canary"] >= 5 and described["energy_samples"]["control"] >= 5


async def test_the_same_energy_per_workload_does_not_roll_the_canary_back(tmp_path: Path) -> None:
    canary = await _energy_run(tmp_path, 20.0, 20.0)
    assert canary.state != "rolled_back", canary.describe()
    assert canary.describe()["energy_samples"]["canary"] >= 5


def test_nodes_on_mains_give_no_drain_samples() -> None:
    hub = StandInHub()
    canary = LiveCanary(
        version=1, config=RolloutConfig(), registry=None, hub=hub, wake=lambda: None, by="t",  # type: ignore[arg-type]
        clock=lambda: 100.0, drain_window_s=0.0, drain_span_s=0.0,
    )  # fmt: skip
    for live in hub.nodes.values():
        canary.observe_power(live, "mains", 80.0)
        canary.observe_power(live, "battery", None)
        canary.observe_power(live, "mains", 70.0)
    assert canary.describe()["drain_samples"] == {"canary": 0, "control": 0}


async def test_a_version_that_hurts_one_node_type_only_is_rolled_back_by_that_types_guard(
    tmp_path: Path,
) -> None:
    """Eighty nodes, one of the canary's forty an edge board: its decisions' regret is high, every
    other node's low. In the pooled window of 30 samples that one node sits under the 95th
    percentile; the edge boards' own guard sees it."""
    store = await _store_with_a_version(tmp_path)
    try:
        registry = PolicyRegistry(store)
        hub = StandInHub()
        hub.nodes = {f"n{i:02d}": NodeLive(f"n{i:02d}", "c", "Ready", "b", 3.0, 0.0) for i in range(80)}
        now = [0.0]
        config = RolloutConfig(
            steps=(0.5, 1.0), dwell_s=600, sustain_s=2, threshold=0.5, min_samples=5, recent=30
        )
        canary = LiveCanary(
            version=1, config=config, registry=registry, hub=hub, wake=lambda: None, by="t",
            clock=lambda: now[0],
        )  # fmt: skip
        await canary.tick()  # half the nodes
        control = sorted(set(hub.nodes) - set(canary.nodes))
        for name, live in hub.nodes.items():
            live.policy_version = 1 if name in canary.nodes else None
            live.node_type = "server"
        bad = canary.nodes[0]
        for name in (bad, *control[:2]):
            hub.nodes[name].node_type = "edge"
        for step in range(60):
            now[0] = step * 0.5
            for name, live in hub.nodes.items():
                canary.observe(live, 1.0 if name == bad else 0.01)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", canary.describe()
        described = canary.describe()
        assert described["events"][-1]["reason"].startswith("edge nodes' decision regret: canary score")
        assert described["scores"]["canary"] <= 0.5  # the pooled signal did not see it
        regret = {c["name"]: c["signals"][0] for c in described["classes"]}
        assert regret["edge"]["signal"] == "regret" and regret["edge"]["scores"]["canary"] > 0.5
        assert regret["server"]["scores"]["canary"] <= 0.5
    finally:
        await store.close()
