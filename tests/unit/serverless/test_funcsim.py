"""The function-instance simulator on traces small enough to work out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.serverless.funcsim import ColdStartModel, simulate, simulate_function
from controlplane.serverless.keepalive import (
    CallGraphAdvisor,
    CallGraphConfig,
    FixedKeepAlive,
    Policy,
    Window,
)
from controlplane.serverless.keepalive import make_policy as make
from controlplane.serverless.synthetic import SyntheticConfig, generate_workload
from controlplane.serverless.traces import FunctionWorkload, Workload

ONE_SECOND = ColdStartModel(base_s=1.0, per_gb_s=0.0)


def fn(fid: str, arrivals: list[float], duration: float = 1.0, memory_mb: float = 1024.0) -> FunctionWorkload:
    a = np.array(arrivals, dtype=np.float64)
    return FunctionWorkload(fid, memory_mb, a, np.full(len(a), duration))


class StubWindow:
    """A policy that always answers the same window."""

    name = "stub"

    def __init__(self, window: Window) -> None:
        self.window = window

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> None:
        return None

    def keep_alive_s(self, function_id: str) -> float:
        return self.window.keep_alive_s

    def prewarm_after_s(self, function_id: str) -> float:
        return self.window.prewarm_s

    def release_window(self, function_id: str, t_s: float, *, idle_instances: int = 0) -> Window:
        return self.window


def test_fixed_keep_alive_cold_starts_and_waste_by_hand() -> None:
    # Cold start 1 s, 1 GB. t=0 cold, ends 2; t=100 warm (idle 98 s), ends 101;
    # alive until 701, so t=1000 is cold (wasted 600 s), ends 1002; then idle to the
    # horizon at 1200 (198 s). Wasted: 98 + 600 + 198 = 896 GB-s.
    f = fn("f", [0.0, 100.0, 1000.0])
    r = simulate_function(f, FixedKeepAlive(600.0, name="fixed"), horizon_s=1200.0, cold_start=ONE_SECOND)
    assert r.cold_starts == 2 and r.invocations == 3
    assert r.wasted_gb_s == pytest.approx(896.0)
    assert list(r.extra_latency_s) == [1.0, 0.0, 1.0]


def test_no_keep_alive_is_always_cold_and_wastes_nothing() -> None:
    f = fn("f", [0.0, 100.0, 1000.0])
    r = simulate_function(f, FixedKeepAlive(0.0, name="none"), horizon_s=1200.0, cold_start=ONE_SECOND)
    assert r.cold_starts == 3 and r.wasted_gb_s == 0.0


def test_concurrent_invocations_need_their_own_instances() -> None:
    # Two overlapping invocations: two cold starts; the third reuses one of the two idle ones.
    f = fn("f", [0.0, 0.5, 30.0], duration=10.0)
    r = simulate_function(f, FixedKeepAlive(600.0, name="fixed"), horizon_s=100.0, cold_start=ONE_SECOND)
    assert r.cold_starts == 2


def test_a_scheduled_prewarm_makes_the_next_arrival_warm_and_counts_its_loading_time() -> None:
    # Ends at 1 (cold start) + 0 s. Window: unload, warm again 50 s after the end (at 51), for 20 s.
    # The load starts 1 s early (at 50); the arrival at 60 is warm; wasted 60 - 50 = 10 s.
    f = fn("f", [0.0, 60.0], duration=0.0)
    r = simulate_function(f, StubWindow(Window(50.0, 20.0)), horizon_s=61.0, cold_start=ONE_SECOND)
    assert r.cold_starts == 1 and r.prewarm_loads == 2
    assert r.wasted_gb_s == pytest.approx(10.0)


def test_an_arrival_before_the_prewarm_is_cold_and_cancels_the_scheduled_load() -> None:
    f = fn("f", [0.0, 20.0], duration=0.0)
    r = simulate_function(f, StubWindow(Window(50.0, 20.0)), horizon_s=30.0, cold_start=ONE_SECOND)
    assert r.cold_starts == 2
    assert r.wasted_gb_s == 0.0  # cancelled before it loaded; the second one's load is past the horizon


def test_a_callgraph_prewarm_turns_the_successors_cold_start_warm() -> None:
    f = fn("B", [105.0])
    none = FixedKeepAlive(0.0, name="none")
    cold = simulate_function(f, none, horizon_s=200.0, cold_start=ONE_SECOND)
    warm = simulate_function(
        f, none, horizon_s=200.0, cold_start=ONE_SECOND, prewarm_times=np.array([100.0]), prewarm_hold_s=60.0
    )
    assert cold.cold_starts == 1 and warm.cold_starts == 0 and warm.callgraph_prewarms == 1
    assert warm.wasted_gb_s == pytest.approx(5.0)  # loaded at 100, used at 105
    late = simulate_function(
        f, none, horizon_s=200.0, cold_start=ONE_SECOND, prewarm_times=np.array([104.5]), prewarm_hold_s=60.0
    )
    assert late.cold_starts == 1 and late.extra_latency_s[0] == pytest.approx(0.5)  # waited for the load


def test_simulate_learns_the_call_graph_and_prewarms_the_successor() -> None:
    parent = [3600.0 * k for k in range(8)]
    child = [t + 5.0 for t in parent]
    w = Workload("chain", 8 * 3600.0, [fn("A", parent), fn("B", child)])
    none = FixedKeepAlive(0.0, name="none")
    with_graph = simulate(
        w, Policy("g", none, CallGraphAdvisor(CallGraphConfig(min_support=3))), cold_start=ONE_SECOND
    )
    without = simulate(w, Policy("n", none), cold_start=ONE_SECOND)
    b_with = next(r for r in with_graph.functions if r.function_id == "B")
    b_without = next(r for r in without.functions if r.function_id == "B")
    assert b_without.cold_starts == 8
    assert b_with.cold_starts == 3  # learned from 3 co-occurrences: A's 4th episode prewarms B


def test_p75_function_cold_start_rate_is_the_75th_percentile_over_functions() -> None:
    # Under a 10-minute keep-alive, functions invoked 1, 2, 3, 4 times a minute apart have cold
    # rates 1, 1/2, 1/3, 1/4; their 75th percentile (linear) is 0.625.
    fs = [fn(f"f{n}", [60.0 * i for i in range(n)]) for n in (1, 2, 3, 4)]
    r = simulate(Workload("t", 600.0, fs), make("fixed-10m"), cold_start=ONE_SECOND)
    assert r.cold_start_rate == pytest.approx(4 / 10)
    assert r.cold_start_rate_p75_function == pytest.approx(0.625)
    assert r.p99_latency_ms == pytest.approx(2000.0)


def test_same_seed_same_results() -> None:
    cfg = SyntheticConfig(functions=30, hours=3)
    a = simulate(generate_workload(cfg, seed=5), make("edgeplane")).summary()
    b = simulate(generate_workload(cfg, seed=5), make("edgeplane")).summary()
    c = simulate(generate_workload(cfg, seed=6), make("edgeplane")).summary()
    for s in (a, b, c):
        s.pop("wall_s")
    assert a == b and a != c
