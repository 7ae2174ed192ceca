"""The lease clock (``hub.leases.LeaseClock``): the same verdicts as ``scan_leases`` over the whole
fleet, at the cost of the nodes whose expiry came; and the heartbeat's cheap telemetry copy."""

from __future__ import annotations

import random
from dataclasses import asdict

from edgeplane_contract.messages import GpuTelemetry, Telemetry

from controlplane.fleet.nodes import NodeLive
from controlplane.hub.leases import LeaseClock, hearing_after, scan_leases
from controlplane.hub.registry import telemetry_dict


def fleet(count: int, rng: random.Random) -> dict[str, NodeLive]:
    return {
        f"n{i}": NodeLive(
            name=f"n{i}",
            cluster=rng.choice(["a", "b"]),
            status="Ready",
            boot_id="b",
            lease_s=rng.choice([1.0, 3.0]),
            last_seen=0.0,
        )
        for i in range(count)
    }


def test_the_clock_expires_exactly_the_nodes_a_full_scan_expires_round_after_round():
    rng = random.Random(7)
    nodes = fleet(300, rng)
    clock = LeaseClock()
    for live in nodes.values():
        clock.arm(live)
    deaf_until = {"a": 0.0, "b": 0.0}
    resumed_at = float("-inf")
    now = 0.0
    for _ in range(400):
        now += rng.uniform(0.01, 0.3)
        for live in nodes.values():  # most heartbeat, some fall silent, some come back
            if live.status == "Ready" and rng.random() < 0.7 and not live.name.endswith("7"):
                live.last_seen = now
            elif live.status != "Ready" and rng.random() < 0.05:
                live.status, live.last_seen = "Ready", now
                clock.arm(live)
        if rng.random() < 0.02:  # a NATS break of one cluster
            deaf_until[rng.choice(["a", "b"])] = now + rng.uniform(0.5, 3.0)
        if rng.random() < 0.01:  # the hub's own stall
            resumed_at = now

        def bus(cluster: str, now: float = now) -> float | None:
            return None if now < deaf_until[cluster] else deaf_until[cluster]

        hearing = hearing_after(bus, resumed_at)
        full = scan_leases(nodes.values(), now, hearing)
        fast = clock.due(nodes, now, hearing)
        assert sorted(n.name for n in fast.expired) == sorted(n.name for n in full.expired), now
        assert fast.deaf <= full.deaf
        for live in full.expired:
            live.status = "NotReady"
    assert len(clock) <= len(nodes)


def test_a_round_looks_only_at_the_nodes_whose_expiry_came():
    nodes = {
        f"n{i}": NodeLive(f"n{i}", "a", "Ready", "b", lease_s=3.0, last_seen=float(i)) for i in range(1000)
    }
    clock = LeaseClock()
    for live in nodes.values():
        clock.arm(live)
    looked = []

    def hearing(cluster: str) -> float:
        looked.append(cluster)
        return 0.0

    scan = clock.due(nodes, 5.5, hearing)  # lease 3 s: n0, n1, n2 are silent beyond it
    assert sorted(n.name for n in scan.expired) == ["n0", "n1", "n2"]
    assert len(looked) == 3


def test_the_heartbeats_telemetry_copy_is_asdict():
    plain = Telemetry(cpu_percent=1.0, memory_used_bytes=2, memory_total_bytes=3)
    full = Telemetry(
        cpu_percent=1.0,
        memory_used_bytes=2,
        memory_total_bytes=3,
        load_1m=0.5,
        power_source="battery",
        battery_percent=40.0,
        power_w=7.5,
        power_method="battery",
        gpus=[
            GpuTelemetry(
                index=0, name="g", utilization_percent=3.0, memory_used_bytes=1, memory_total_bytes=2
            )
        ],
        weights=[0.1, 0.2, 0.3, 0.4],
        policy="heuristic",
    )
    for telemetry in (plain, full):
        assert telemetry_dict(telemetry) == asdict(telemetry)
    assert telemetry_dict(None) == {}
