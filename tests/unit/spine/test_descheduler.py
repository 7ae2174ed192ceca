"""The descheduler's rules (hub/descheduler.py) on a stand-in hub: what is anomalous, what may
move, and a disruption budget that no sequence of passes exceeds."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.fleet.nodes import NodeLive
from controlplane.hub.descheduler import (
    Descheduler,
    DeschedulerSettings,
    DisruptionBudget,
    movable,
    node_anomaly,
)
from controlplane.specs.workload import WorkloadSpec


def live(name: str, *, battery: float | None = None, load: float | None = None) -> NodeLive:
    node = NodeLive(name=name, cluster="c", status="Ready", boot_id="b", lease_s=3.0, last_seen=0.0)
    if battery is not None:
        node.power_source, node.battery_percent = "battery", battery
    if load is not None:
        node.telemetry = {"load_1m": load}
    return node


def test_what_is_anomalous_and_what_may_move() -> None:
    settings = DeschedulerSettings()
    assert node_anomaly(live("a", battery=10), settings) == "battery at 10% on battery power (floor 15%)"
    assert node_anomaly(live("a", battery=40), settings) is None
    assert node_anomaly(live("a", load=20), settings, cores=4) is None  # overload is opt-in
    overload = DeschedulerSettings(load_per_core_max=2.0)
    assert node_anomaly(live("a", load=12), overload, cores=4) == "run queue 3.0 per core (over 2)"
    assert node_anomaly(live("a", load=6), overload, cores=4) is None
    assert movable(WorkloadSpec(name="w", command=["x"], restart_policy="on-failure"))
    assert movable(WorkloadSpec(name="w", command=["x"], kind="service", replicas=3))
    assert not movable(WorkloadSpec(name="w", command=["x"]))
    assert not movable(WorkloadSpec(name="w", command=["x"], kind="service", replicas=1))
    with pytest.raises(ValueError):
        DeschedulerSettings(max_unavailable_per_workload=0)


def test_the_budget_counts_moves_in_a_sliding_window_and_per_workload() -> None:
    budget = DisruptionBudget(max_moves=2, window_s=60, per_workload=1)
    assert budget.allows("w1", 0.0, {})
    budget.spend(0.0)
    assert not budget.allows("w1", 1.0, {"w1": 1})  # one of w1's replicas is on its way
    assert budget.allows("w2", 1.0, {"w1": 1})
    budget.spend(1.0)
    assert budget.left(59.0) == 0 and budget.left(60.0) == 1 and budget.left(61.0) == 2


class StandIn:
    """The hub's side, in memory: placements on nodes, specs, moves and cordons recorded."""

    def __init__(self, nodes: dict[str, NodeLive], placements: dict[str, tuple[str, str, int]]) -> None:
        self.nodes = nodes
        self.placements = placements  # id -> (node, workload, replica)
        self.specs = {
            "keep": WorkloadSpec(name="keep", command=["x"]),
            **{f"w{i}": WorkloadSpec(name=f"w{i}", command=["x"], restart_policy="always") for i in range(6)},
        }
        self.moved: list[str] = []
        self.cordons: list[tuple[str, bool]] = []

    def placements_on(self, node: str) -> list[tuple[str, str, int]]:
        return [(p, w, r) for p, (n, w, r) in sorted(self.placements.items()) if n == node]

    def is_active(self, placement_id: str) -> bool:
        return placement_id in self.placements

    async def specs_of(self, ids: list[str]) -> dict[str, WorkloadSpec]:
        return {i: self.specs[i] for i in ids}

    async def move_placement(self, placement_id: str, reason: str) -> bool:
        self.moved.append(placement_id)
        return True

    def cordon(self, node: str, cordoned: bool) -> None:
        self.cordons.append((node, cordoned))

    def cores(self, node: str) -> float | None:
        return 4.0


async def test_a_collapsing_node_is_cordoned_and_drained_no_faster_than_the_budget() -> None:
    nodes = {"a": live("a", battery=50), "b": live("b")}
    placements: dict[str, Any] = {f"p{i}": ("a", f"w{i}", 0) for i in range(6)}
    placements["p-keep"] = ("a", "keep", 0)
    placements["p-w0-1"] = ("a", "w0", 1)  # a second replica of w0
    hub = StandIn(nodes, placements)
    now = [0.0]
    settings = DeschedulerSettings(sustain_s=10, max_moves=2, window_s=60)
    d = Descheduler(hub, settings, clock=lambda: now[0])
    assert await d.pass_once() == [] and hub.cordons == []
    nodes["a"].battery_percent = 5.0
    moves_at: list[float] = []
    for t in range(0, 200, 5):  # a pass every 5 s for 200 s; moved placements end 5 s later
        now[0] = float(t)
        for placement_id in list(hub.moved):
            placements.pop(placement_id, None)
        moved = await d.pass_once()
        moves_at += [now[0]] * len(moved)
        assert not {"p0", "p-w0-1"} <= set(moved)  # one replica of w0 on its way at a time
        # Never more than 2 moves in any 60 s window.
        assert all(sum(1 for m in moves_at if t - 60 < m <= t) <= 2 for t in moves_at)
    assert hub.cordons == [("a", True)]  # at 10 s, once it had been anomalous for sustain_s
    assert moves_at[0] == 10.0
    assert "p-keep" not in hub.moved  # restart_policy never: it stays
    assert sorted(hub.moved) == sorted([f"p{i}" for i in range(6)] + ["p-w0-1"])
    assert d.held_by_budget > 0
    nodes["a"].power_source = "mains"
    await d.pass_once()
    assert hub.cordons[-1] == ("a", False)
