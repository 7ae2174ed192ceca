"""Energy per workload (controlplane/fleet/energy.py): a node's reported draw between heartbeats,
shared among the placements running there by their CPU requests."""

from __future__ import annotations

import pytest

from controlplane.fleet.energy import EnergyMeter


def test_the_draw_between_heartbeats_is_shared_by_cpu_request() -> None:
    meter = EnergyMeter()
    meter.heard("n1", 0.0, 100.0, "model", [("a", 1.0), ("b", 3.0)])  # the first reading: no interval
    meter.heard("n1", 2.0, 140.0, "model", [("a", 1.0), ("b", 3.0)])  # 240 J over 2 s
    meter.heard("n1", 3.0, 140.0, "model", [("b", 3.0)])  # 140 J, b alone
    a, b = meter.ended("a"), meter.ended("b")
    assert a is not None and b is not None
    assert a.joules == pytest.approx(60.0) and a.vcpu_s == pytest.approx(2.0)
    assert b.joules == pytest.approx(180.0 + 140.0) and b.vcpu_s == pytest.approx(9.0)
    assert a.watts_per_vcpu == pytest.approx(30.0) and b.watts_per_vcpu == pytest.approx(320.0 / 9.0)
    assert meter.node_joules[("n1", "model")] == pytest.approx(380.0)
    assert meter.ended("a") is None and len(meter) == 0  # forgotten once ended


def test_a_silence_or_a_missing_reading_is_not_guessed_across() -> None:
    meter = EnergyMeter(max_gap_s=5.0)
    meter.heard("n1", 0.0, 10.0, "battery", [("a", 1.0)])
    meter.heard("n1", 60.0, 10.0, "battery", [("a", 1.0)])  # 60 s apart: counted as 5 s
    assert meter.node_joules[("n1", "battery")] == pytest.approx(50.0)
    meter.heard("n1", 61.0, None, "", [("a", 1.0)])  # no reading: the next interval starts afresh
    meter.heard("n1", 62.0, 10.0, "battery", [("a", 1.0)])
    meter.node_lost("n1")
    meter.heard("n1", 63.0, 10.0, "battery", [("a", 1.0)])
    meter.heard("n1", 62.5, 10.0, "battery", [("a", 1.0)])  # out of order: no interval
    for bad in (float("nan"), -1.0, float("inf")):
        meter.heard("n1", 64.0, bad, "battery", [("a", 1.0)])
    used = meter.ended("a")
    assert used is not None and used.joules == pytest.approx(50.0) and used.method == "battery"


def test_without_cpu_requests_the_share_is_even_and_no_per_vcpu_figure() -> None:
    meter = EnergyMeter()
    meter.heard("n1", 0.0, 30.0, "rapl", [("a", 0.0), ("b", 0.0)])
    meter.heard("n1", 1.0, 30.0, "rapl", [("a", 0.0), ("b", 0.0)])
    a = meter.ended("a")
    assert a is not None and a.joules == pytest.approx(15.0) and a.watts_per_vcpu is None
