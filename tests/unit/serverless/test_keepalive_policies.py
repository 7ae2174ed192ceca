"""Keep-alive policies: histogram arithmetic and the windows on constructed idle-time sequences."""

from __future__ import annotations

import math

import pytest

from controlplane.serverless.keepalive import (
    POLICY_NAMES,
    BurstPool,
    BurstPoolConfig,
    EdgeplaneKeepAlive,
    HybridConfig,
    HybridHistogramPolicy,
    IdleTimeHistogram,
    UnknownPolicyError,
    Window,
    make_policy,
)


def feed_idle_times(policy: HybridHistogramPolicy, fid: str, idle_times: list[float]) -> None:
    """Invocations of zero duration separated by the given idle times."""
    t = 0.0
    policy.observe_invocation(fid, t)
    for it in idle_times:
        t += it
        policy.observe_invocation(fid, t)


def test_histogram_percentile_bins_and_cv_on_known_counts() -> None:
    h = IdleTimeHistogram(range_s=600.0, bin_s=60.0)  # 10 bins
    for it in [30.0] * 5 + [150.0] * 90 + [500.0] * 5:
        h.add(it)
    assert h.counts[0] == 5 and h.counts[2] == 90 and h.counts[8] == 5
    assert h.percentile_bin(5) == 0
    assert h.percentile_bin(6) == 2
    assert h.percentile_bin(95) == 2
    assert h.percentile_bin(99) == 8
    mean = 10.0
    std = math.sqrt((5**2 + 90**2 + 5**2) / 10 - mean**2)
    assert h.cv() == pytest.approx(std / mean)


def test_histogram_counts_beyond_range_as_out_of_bounds_with_a_smoothed_level() -> None:
    h = IdleTimeHistogram(range_s=600.0, bin_s=60.0, alpha=0.5)
    h.add(1000.0)
    h.add(2000.0)
    assert h.n_in == 0 and h.n_oob == 2
    assert h.forecast_oob_s() == pytest.approx(1500.0)


def test_periodic_function_gets_a_prewarm_window_and_a_short_keep_alive() -> None:
    policy = HybridHistogramPolicy()
    feed_idle_times(policy, "cron", [1800.0] * 20)
    # All idle times in bin 30: pre-warm at 30 min - 10 %, window ends at 31 min + 10 %.
    assert policy.prewarm_after_s("cron") == pytest.approx(30 * 60 * 0.9)
    assert policy.keep_alive_s("cron") == pytest.approx(31 * 60 * 1.1 - 30 * 60 * 0.9)
    assert policy.keep_alive_s("cron") < 600.0


def test_too_little_history_falls_back_to_keeping_alive_for_the_histogram_range() -> None:
    policy = HybridHistogramPolicy()
    feed_idle_times(policy, "new", [1800.0] * 5)
    assert policy.compute_window("new") == Window(0.0, 4 * 3600.0)
    for k in range(6, 16):
        policy.observe_invocation("new", 1800.0 * k)
    assert policy.compute_window("new").prewarm_s > 0


def test_flat_histogram_falls_back_even_with_plenty_of_history() -> None:
    policy = HybridHistogramPolicy()
    feed_idle_times(policy, "flat", [60.0 * b + 30.0 for b in range(240)])
    assert policy.histogram("flat").cv() < 2.0
    assert policy.compute_window("flat") == Window(0.0, 4 * 3600.0)


def test_out_of_bounds_idle_times_use_the_forecast() -> None:
    policy = HybridHistogramPolicy()
    feed_idle_times(policy, "daily", [5 * 3600.0, 7 * 3600.0])
    f = 6 * 3600.0  # exponential smoothing with alpha 0.5
    w = policy.compute_window("daily")
    assert w.prewarm_s == pytest.approx(f * 0.85)
    assert w.keep_alive_s == pytest.approx(f * 0.30)


def test_idle_time_counts_from_the_end_of_the_latest_invocation() -> None:
    policy = HybridHistogramPolicy()
    policy.observe_invocation("f", 0.0, 100.0)
    policy.observe_invocation("f", 50.0, 10.0)  # overlaps the first: idle time 0
    policy.observe_invocation("f", 400.0, 1.0)  # 300 s after the first one's end
    h = policy.histogram("f")
    assert h.counts[0] == 1 and h.counts[5] == 1 and h.n_in == 2


def test_hybrid_unloads_extra_instances_when_it_prewarms() -> None:
    policy = HybridHistogramPolicy()
    feed_idle_times(policy, "cron", [1800.0] * 20)
    assert policy.release_window("cron", 0.0, idle_instances=0).prewarm_s > 0
    assert policy.release_window("cron", 0.0, idle_instances=1) == Window(0.0, 0.0)


def test_hybrid_recomputes_a_busy_functions_window_at_most_once_per_refresh() -> None:
    policy = HybridHistogramPolicy(HybridConfig(min_samples=2, refresh_s=60.0))
    feed_idle_times(policy, "f", [10.0] * 10)
    before = policy.release_window("f", 1000.0)
    feed_idle_times(policy, "f", [1800.0] * 10)
    assert policy.release_window("f", 1010.0) == before  # cached within the minute
    assert policy.release_window("f", 1061.0) != before


def test_fixed_baselines_windows() -> None:
    assert make_policy("fixed-10m").keepalive.release_window("f", 0.0) == Window(0.0, 600.0)
    assert make_policy("no-keepalive").keepalive.release_window("f", 0.0) == Window(0.0, 0.0)


def test_make_policy_builds_every_registered_name_and_rejects_others() -> None:
    for name in POLICY_NAMES:
        policy = make_policy(name)
        assert policy.name == name and policy.keepalive.name == name
    assert make_policy("edgeplane").advisor is not None
    assert make_policy("edgeplane-no-callgraph").advisor is None
    with pytest.raises(UnknownPolicyError, match="nope"):
        make_policy("nope")


def test_edgeplane_trusts_a_short_regular_history_that_plain_hybrid_does_not() -> None:
    edge = make_policy("edgeplane").keepalive
    plain = HybridHistogramPolicy()
    for p in (edge, plain):
        t = 0.0
        for _ in range(4):
            p.observe_invocation("hourly", t)
            t += 3600.0
    assert plain.prewarm_after_s("hourly") == 0.0 and plain.keep_alive_s("hourly") == 4 * 3600.0
    assert edge.prewarm_after_s("hourly") == pytest.approx(60 * 60 * 0.9)


def test_burst_pool_keeps_standby_instances_for_a_while_after_a_spike() -> None:
    pool = BurstPool(BurstPoolConfig(max_standby=4, hold_s=600.0))
    for i in range(20):
        pool.observe("f", float(i), 1)
    assert pool.standby("f", 20.0) == 0
    pool.observe("f", 30.0, 6)
    assert pool.standby("f", 31.0) == 4
    assert pool.standby("f", 30.0 + 601.0) == 0


def test_edgeplane_keeps_extra_instances_as_standby_after_a_spike_and_caps_them_otherwise() -> None:
    pool = BurstPool()
    ka = EdgeplaneKeepAlive(HybridHistogramPolicy(), pool, extra_keep_alive_s=600.0)
    ka.observe_invocation("f", 0.0)  # no history: the fallback window is 4 h
    assert ka.release_window("f", 1.0, idle_instances=0) == Window(0.0, 4 * 3600.0)
    assert ka.release_window("f", 1.0, idle_instances=1) == Window(0.0, 600.0)
    feed_idle_times(ka.hybrid, "g", [1.0] * 30)  # busy: 66 s keep-alive
    pool.observe("g", 31.0, 5)
    assert ka.release_window("g", 32.0, idle_instances=2) == Window(0.0, 600.0)
    assert ka.release_window("g", 32.0, idle_instances=0).keep_alive_s == pytest.approx(66.0)


def test_regular_gaps_between_bursts_are_told_apart_from_irregular_ones() -> None:
    periodic = IdleTimeHistogram()
    irregular = IdleTimeHistogram()
    for _ in range(10):
        for _ in range(9):  # back-to-back invocations inside a burst
            periodic.add(0.0)
            irregular.add(0.0)
        periodic.add(14.5 * 60)  # a burst every ~15 minutes
    for gap_min in (3, 20, 45, 90, 150, 200):
        irregular.add(gap_min * 60.0)
    assert periodic.percentile_bin(5.0, start_bin=1) == 14
    assert periodic.gaps_are_regular()
    assert not irregular.gaps_are_regular()


def test_edgeplane_holds_burst_capacity_only_through_regular_gaps() -> None:
    ka = EdgeplaneKeepAlive(HybridHistogramPolicy(), None, extra_keep_alive_s=600.0)
    irregular = [300.0 * (k % 6 + 1) for k in range(12)]
    for fid, gaps in (("cron-burst", [900.0] * 12), ("random-burst", irregular)):
        t = 0.0
        for gap in gaps:
            for j in range(5):
                ka.observe_invocation(fid, t + j, 30.0)
            t += 34.0 + gap
    assert ka.hybrid.window_source("cron-burst") == "histogram"
    cron = ka.release_window("cron-burst", t, idle_instances=3)
    assert cron.keep_alive_s > 900.0  # kept through the next burst
    assert ka.release_window("random-burst", t, idle_instances=3).keep_alive_s == 600.0
