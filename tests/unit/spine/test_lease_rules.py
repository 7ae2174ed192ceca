"""Lease rules, as tables: who is silent, what is a partition, how long a silent node's work is held."""

from __future__ import annotations

import pytest

from controlplane.federation.config import ClusterConfig
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.leases import IntakeLag, hold_for, hold_over, partitions, scan_leases

NOW = 1000.0
LEASE = 3.0


def node(name: str, *, silent_s: float, cluster: str = "c1", status: str = "Ready") -> NodeLive:
    return NodeLive(
        name=name, cluster=cluster, status=status, boot_id="b", lease_s=LEASE, last_seen=NOW - silent_s
    )


def hearing(since: dict[str, float | None]):
    return lambda cluster: since.get(cluster, 0.0)


@pytest.mark.parametrize(
    ("silent_s", "status", "since", "expired", "deaf"),
    [
        (1.0, "Ready", {}, False, set()),
        (LEASE + 0.1, "Ready", {}, True, set()),
        (LEASE, "Ready", {}, False, set()),  # exactly the lease: still in it
        (LEASE + 0.1, "NotReady", {}, False, set()),  # already expired once
        (60.0, "Ready", {"c1": None}, False, {"c1"}),  # the hub cannot hear: nobody expires
        (60.0, "Ready", {"c1": NOW - 1.0}, False, set()),  # just reconnected: a full lease again
        (60.0, "Ready", {"c1": NOW - LEASE - 1}, True, set()),
    ],
)
def test_silence_counts_only_while_and_since_the_hub_can_hear(silent_s, status, since, expired, deaf):
    live = node("n1", silent_s=silent_s, status=status)
    scan = scan_leases([live], NOW, hearing(since))
    assert (live in scan.expired, scan.deaf) == (expired, deaf)


C1 = ClusterConfig(name="c1", region="r", partition_share=0.55, autonomy_window_s=300.0)


@pytest.mark.parametrize(
    ("silent", "ready", "dead_long_ago", "partition"),
    [
        (1, 2, 0, False),  # one of three: a failed node
        (2, 1, 0, True),  # two of three: 0.67 >= 0.55
        (2, 0, 0, False),  # two nodes only: too few to tell
        (2, 2, 0, False),  # two of four: 0.5 < 0.55
        (3, 2, 0, True),
        (1, 1, 5, False),  # long-dead nodes are no members: one of two, and too few
    ],
)
def test_a_large_share_of_a_cluster_silent_at_once_is_a_partition(silent, ready, dead_long_ago, partition):
    expired = [node(f"s{i}", silent_s=LEASE + 1) for i in range(silent)]
    others = [node(f"r{i}", silent_s=0.5) for i in range(ready)]
    dead = [node(f"d{i}", silent_s=10_000.0, status="NotReady") for i in range(dead_long_ago)]
    found = partitions(expired, expired + others + dead, NOW, {"c1": C1}.get)
    assert bool(found) is partition
    if partition:
        assert (found[0].cluster, found[0].silent, found[0].members) == ("c1", silent, silent + ready)


def test_silence_in_an_unknown_cluster_is_never_a_partition():
    expired = [node(f"s{i}", silent_s=LEASE + 1, cluster="elsewhere") for i in range(3)]
    assert partitions(expired, expired, NOW, {"c1": C1}.get) == []


@pytest.mark.parametrize(
    ("grace", "partitioned", "hold"),
    [
        (30.0, False, 30.0),  # the eviction grace
        (0.0, False, None),  # placed again at lease expiry
        (30.0, True, 300.0),  # the autonomy window
        (0.0, True, 300.0),
    ],
)
def test_how_long_a_silent_nodes_work_is_held(grace, partitioned, hold):
    config = ClusterConfig(name="c1", region="r", eviction_grace_s=grace, autonomy_window_s=300.0)
    assert hold_for(config, partitioned=partitioned) == hold
    assert hold_for(None, partitioned=partitioned) is None


@pytest.mark.parametrize(
    ("silent_s", "since", "over"),
    [
        (LEASE + 29.0, {}, False),
        (LEASE + 31.0, {}, True),
        (LEASE + 31.0, {"c1": None}, False),  # not while the hub cannot hear
        (LEASE + 31.0, {"c1": NOW - 5.0}, False),  # counted again from the reconnect
    ],
)
def test_a_hold_ends_after_lease_plus_hold_of_silence_the_hub_could_hear(silent_s, since, over):
    live = node("n1", silent_s=silent_s, status="NotReady")
    live.held, live.hold_s = True, 30.0
    assert hold_over(live, NOW, hearing(since)) is over


def test_the_hubs_intake_lag_is_slack_on_a_lease_and_one_skewed_clock_does_not_move_it():
    lag = IntakeLag(samples=5, cap_s=10.0)
    assert lag.seconds() == 0.0
    for sample in (1.9, 2.0, 2.1, 2.0, -50.0):  # a backlog of about 2 s; one clock far ahead
        lag.observe(sample)
    assert lag.seconds() == 2.0
    for _ in range(5):
        lag.observe(1e6)  # clocks that all run slow cannot hold leases open forever
    assert lag.seconds() == 10.0

    nodes = [node("a", silent_s=LEASE + 0.5), node("b", silent_s=LEASE + 2.5)]
    silent = scan_leases(nodes, NOW, hearing({"c1": 0.0}), slack_s=2.0).expired
    heard = [n for n in nodes if n not in silent]
    assert [n.name for n in silent] == ["b"] and [n.name for n in heard] == ["a"]
    silent = scan_leases(nodes, NOW, hearing({"c1": None}), slack_s=0.0).expired  # deaf: nobody
    heard = [n for n in nodes if n not in silent]
    assert silent == [] and len(heard) == 2


def test_a_node_just_admitted_has_twice_its_lease_until_its_first_heartbeat():
    admitted = node("new", silent_s=LEASE * 1.5)
    admitted.startup_s = LEASE
    assert scan_leases([admitted], NOW, hearing({})).expired == []  # within the startup grace
    admitted.startup_s = 0.0  # what its first heartbeat does
    assert scan_leases([admitted], NOW, hearing({})).expired == [admitted]
    late = node("late", silent_s=LEASE * 2 + 0.1)
    late.startup_s = LEASE
    assert scan_leases([late], NOW, hearing({})).expired == [late]  # silent past the grace too
