"""Forecast-driven pre-warming: causal decisions, their effect in the simulator, and the registry."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from controlplane.cli import main
from controlplane.predict import PredictDependencyError
from controlplane.serverless.forecast_prewarm import (
    ForecastPrewarmConfig,
    ForecastPrewarmer,
    PrewarmPlan,
    arrival_counts,
    instances_needed,
    next_bin_forecast,
)
from controlplane.serverless.funcsim import (
    ColdStartModel,
    FunctionResult,
    SimulationResult,
    simulate,
    simulate_function,
)
from controlplane.serverless.keepalive import POLICY_NAMES, FixedKeepAlive, Policy, make_policy
from controlplane.serverless.span_metrics import span_metrics
from controlplane.serverless.synthetic import SyntheticConfig, generate_workload
from controlplane.serverless.traces import FunctionWorkload, Workload

ONE_SECOND = ColdStartModel(base_s=1.0, per_gb_s=0.0)
SEASONAL = ForecastPrewarmConfig(forecaster="seasonal")
NO_KEEPALIVE = FixedKeepAlive(0.0, name="none")


def run(w: Workload, config: ForecastPrewarmConfig | None = None, **kw: float) -> SimulationResult:
    """No keep-alive at all, so that every warm start is the forecast's doing."""
    forecast = ForecastPrewarmer(config) if config is not None else None
    return simulate(w, Policy("p", NO_KEEPALIVE, forecast=forecast), cold_start=ONE_SECOND, **kw)


def run_plan(f: FunctionWorkload, plan: PrewarmPlan, horizon_s: float) -> FunctionResult:
    return simulate_function(f, NO_KEEPALIVE, horizon_s=horizon_s, cold_start=ONE_SECOND, forecast_plan=plan)


def fn(fid: str, arrivals: list[float], duration: float = 1.0, memory_mb: float = 1024.0) -> FunctionWorkload:
    a = np.array(arrivals, dtype=np.float64)
    return FunctionWorkload(fid, memory_mb, a, np.full(len(a), duration))


def every_minute(minutes: int, at_s: float = 30.0) -> list[float]:
    return [60.0 * m + at_s for m in range(minutes)]


def plan_for(fid: str, plans: list[PrewarmPlan | None], w: Workload) -> PrewarmPlan | None:
    return plans[[f.function_id for f in w.functions].index(fid)]


# ---------------------------------------------------------------------------------------------
# Causality


@pytest.mark.parametrize("forecaster", ["seasonal", "learned"])
def test_changing_later_counts_changes_no_earlier_forecast(forecaster: str) -> None:
    rng = np.random.default_rng(0)
    counts = rng.poisson(2.0, size=(4, 120)).astype(np.float64)
    cfg = ForecastPrewarmConfig(forecaster=forecaster)  # type: ignore[arg-type]
    before = next_bin_forecast(counts, cfg)
    changed = counts.copy()
    changed[:, 100:] = rng.poisson(9.0, size=(4, 20))
    after = next_bin_forecast(changed, cfg)
    # Bin m's forecast is made at its start: bins >= 100 may change only forecasts of bins > 100.
    np.testing.assert_array_equal(before[:, :101], after[:, :101])
    assert not np.array_equal(before[:, 101:], after[:, 101:])
    if forecaster == "learned":  # fitted on the first 2/3 (80 bins), deciding only after them
        assert np.isnan(before[:, :80]).all() and np.isfinite(before[:, 80:]).all()


def test_changing_future_arrivals_does_not_change_earlier_prewarm_decisions() -> None:
    base = every_minute(60)
    w1 = Workload("w", 3600.0, [fn("f", base)])
    w2 = Workload("w", 3600.0, [fn("f", base[:40] + [60.0 * 40 + s for s in range(0, 60, 2)])])
    p1 = ForecastPrewarmer(SEASONAL).plan(w1)[0]
    p2 = ForecastPrewarmer(SEASONAL).plan(w2)[0]
    assert p1 is not None and p2 is not None
    early1, early2 = p1.starts_s <= 40 * 60.0, p2.starts_s <= 40 * 60.0
    np.testing.assert_array_equal(p1.starts_s[early1], p2.starts_s[early2])
    np.testing.assert_array_equal(p1.instances[early1], p2.instances[early2])


# ---------------------------------------------------------------------------------------------
# Decisions


def test_arrival_counts_bin_each_minute() -> None:
    w = Workload("w", 180.0, [fn("f", [1.0, 59.9, 60.0, 179.0])])
    np.testing.assert_array_equal(arrival_counts(w), [[2.0, 1.0, 1.0]])


def test_threshold_is_on_the_probability_of_at_least_one_arrival() -> None:
    forecast = np.array([[np.nan, 0.5, 0.7, 3.0]])  # P(>= 1) = -, 0.39, 0.50, 0.95
    busy = np.full_like(forecast, 50.0)
    single = instances_needed(forecast, busy, ForecastPrewarmConfig(threshold=0.5))
    np.testing.assert_array_equal(single, [[0, 0, 1, 1]])
    multi = instances_needed(forecast, busy, ForecastPrewarmConfig(threshold=0.5, multi=True))
    np.testing.assert_array_equal(multi, [[0, 0, 1, 3]])  # 3 arrivals of 50 s in a minute overlap


def test_a_function_never_predicted_gets_no_prewarm() -> None:
    w = Workload("w", 7200.0, [fn("once", [100.0]), fn("busy", every_minute(120))])
    plans = ForecastPrewarmer(SEASONAL).plan(w)
    assert plan_for("once", plans, w) is None
    r = run(w, SEASONAL)
    once = next(x for x in r.functions if x.function_id == "once")
    assert once.forecast_prewarms == 0 and once.wasted_gb_s == 0.0
    assert r.forecast_prewarms > 0  # the busy one is pre-warmed


# ---------------------------------------------------------------------------------------------
# The simulator carries plans out


def test_a_plan_loads_at_the_minute_start_and_holds_to_its_end_by_hand() -> None:
    # Request at 60 s for one free instance until 120 s; the arrival at 90 s is warm; the
    # instance idled from its load at 60 to 90 (30 GB-s); then no keep-alive.
    plan = PrewarmPlan(np.array([60.0]), np.array([120.0]), np.array([1]))
    f = fn("f", [90.0])
    r = run_plan(f, plan, 200.0)
    assert r.cold_starts == 0 and r.forecast_prewarms == 1
    assert r.wasted_gb_s == pytest.approx(30.0)


def test_consecutive_requests_hold_one_instance_instead_of_reloading() -> None:
    starts = np.array([60.0, 120.0, 180.0])
    plan = PrewarmPlan(starts, starts + 60.0, np.ones(3, dtype=np.int64))
    r = run_plan(fn("f", [230.0]), plan, 300.0)
    assert r.cold_starts == 0 and r.forecast_prewarms == 1
    assert r.wasted_gb_s == pytest.approx(230.0 - 60.0)


def test_requests_after_the_last_arrival_still_cost_memory() -> None:
    plan = PrewarmPlan(np.array([120.0]), np.array([180.0]), np.array([1]))
    r = run_plan(fn("f", [10.0]), plan, 300.0)
    assert r.forecast_prewarms == 1 and r.wasted_gb_s == pytest.approx(60.0)


def test_a_regular_function_gets_fewer_cold_starts_with_the_forecast() -> None:
    w = Workload("w", 7200.0, [fn("regular", every_minute(120))])
    without, with_fc = run(w), run(w, SEASONAL)
    assert without.cold_starts == 120
    assert with_fc.cold_starts <= 2 and with_fc.forecast_prewarms >= 100


def test_learned_forecast_prewarms_only_after_its_training_span() -> None:
    w = Workload("w", 7200.0, [fn("regular", every_minute(120)), fn("other", every_minute(120, at_s=10.0))])
    r = run(w, ForecastPrewarmConfig(), waste_split_s=80 * 60.0)
    test = span_metrics(w, r, 80 * 60.0)
    assert r.cold_starts >= 2 * 80  # every call cold in the 80 training minutes
    assert test.invocations == 80 and test.cold_starts <= 2
    assert r.forecast_prewarms >= 2 and test.wasted_memory_gb_s > 0


def test_multi_asks_for_instances_for_overlapping_arrivals() -> None:
    # Three 40 s calls at 5, 10 and 15 s of every minute: three instances each minute.
    arrivals = sorted(60.0 * m + s for m in range(60) for s in (5.0, 10.0, 15.0))
    w = Workload("w", 3600.0, [fn("f", arrivals, duration=40.0)])
    single, multi = run(w, SEASONAL), run(w, dataclasses.replace(SEASONAL, multi=True))
    assert multi.cold_starts < single.cold_starts / 2


# ---------------------------------------------------------------------------------------------
# Registry, optional dependency, existing policies


def test_the_forecast_policies_are_registered_and_the_others_have_none() -> None:
    for name in ("edgeplane-forecast", "edgeplane-forecast-multi", "edgeplane-forecast-seasonal"):
        assert make_policy(name).forecast is not None
    assert all(make_policy(n).forecast is None for n in POLICY_NAMES if "forecast" not in n)


def test_without_scikit_learn_the_learned_policy_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` fail
    with pytest.raises(PredictDependencyError, match=r"pip install -e '\.\[predict\]'"):
        make_policy("edgeplane-forecast")
    assert make_policy("edgeplane-forecast-seasonal").forecast is not None  # numpy only
    argv = ["simulate-functions", "--trace", "synthetic", "--functions", "3", "--hours", "1"]
    assert main([*argv, "--policies", "edgeplane,edgeplane-forecast"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install -e '.[predict]'" in err and "Traceback" not in err


def test_existing_policies_results_are_unchanged() -> None:
    # Figures of the simulator before forecast pre-warming existed (same workload, same policies).
    w = generate_workload(SyntheticConfig(functions=40, hours=4), seed=3)
    expected = {
        "fixed-10m": (261, 72599.18876369533, 0),
        "edgeplane": (219, 91388.06910854808, 304),
    }
    for name, (cold, waste, spares) in expected.items():
        r = simulate(w, make_policy(name), waste_split_s=3600.0)
        assert (r.cold_starts, r.spare_loads, r.forecast_prewarms) == (cold, spares, 0)
        assert r.wasted_memory_gb_s == pytest.approx(waste, rel=1e-12)
        late = sum(f.wasted_gb_s_after_split for f in r.functions)
        assert 0.0 < late < r.wasted_memory_gb_s
    # A forecast pre-warmer that asks for nothing changes nothing.
    empty = simulate(w, dataclasses.replace(make_policy("edgeplane"), forecast=_NoRequests())).summary()
    plain = simulate(w, make_policy("edgeplane")).summary()
    empty.pop("wall_s"), plain.pop("wall_s")
    assert empty == plain


class _NoRequests:
    def plan(self, workload: Workload) -> list[PrewarmPlan | None]:
        return [None] * len(workload.functions)
