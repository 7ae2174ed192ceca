"""The hub's own stalls, as tables: what the loop watch measures, when a stall extends the leases."""

from __future__ import annotations

import pytest

from controlplane.fleet.nodes import NodeLive
from controlplane.hub.leases import hearing_after, scan_leases, stall_matters
from controlplane.hub.stall import LoopWatch

LEASE = 1.0


def node(*, last_seen: float, status: str = "Ready", held: bool = False) -> NodeLive:
    return NodeLive(
        name="n1", cluster="c1", status=status, boot_id="b", lease_s=LEASE, last_seen=last_seen, held=held
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("ticks", "expected"),
    [
        ([0.1, 0.2, 0.3], 0.0),  # on time: no stall
        ([0.1, 3.1, 3.2], 2.9),  # one late tick: a stall of the lag beyond the period
        ([0.1, 1.1, 3.1], 1.9),  # the longest of two
    ],
)
def test_the_loop_watch_reports_the_longest_lag_beyond_its_period(ticks, expected):
    clock = Clock()
    watch = LoopWatch(period_s=0.1, clock=clock)
    watch.beat()
    for tick in ticks:
        clock.now = tick
        watch.beat()
    stall, _ = watch.take()
    assert stall == pytest.approx(expected)
    assert watch.take()[0] == 0.0  # taken once


def test_a_stall_the_watch_has_not_ticked_after_yet_counts_once_ending_now():
    clock = Clock()
    watch = LoopWatch(period_s=0.1, clock=clock)
    watch.beat()
    clock.now = 5.0  # the loop woke; the lease check runs before the watch's own tick
    assert watch.take() == (pytest.approx(4.9), 5.0)
    clock.now = 5.01
    watch.beat()  # its late tick afterwards: already counted
    assert watch.take()[0] == 0.0


@pytest.mark.parametrize(
    ("stall_s", "status", "held", "matters"),
    [
        (0.4, "Ready", False, False),  # under half a lease: the nodes' own silence is judged
        (0.6, "Ready", False, True),
        (3.0, "NotReady", False, False),  # nobody whose lease it could cut
        (3.0, "NotReady", True, True),  # a held node's hold counts from the lease too
    ],
)
def test_a_stall_matters_beyond_half_the_shortest_lease(stall_s, status, held, matters):
    assert stall_matters(stall_s, [node(last_seen=0.0, status=status, held=held)]) is matters


def test_after_a_stall_silence_counts_from_when_the_hub_woke_as_after_a_reconnect():
    live = node(last_seen=10.0)
    plain = scan_leases([live], 14.0, lambda _: 0.0)
    assert plain.expired == [live]  # silent 4 s of a 1 s lease: the hub would blame it
    woke = hearing_after(lambda _: 0.0, 13.5)
    assert scan_leases([live], 14.0, woke).expired == []
    assert hearing_after(lambda _: None, 13.5)("c1") is None  # deaf stays deaf
