"""The live hub's forecast pre-warm: the simulator's decision, made bin by bin as arrivals come."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

from controlplane.cli import main
from controlplane.serverless.forecast_live import LiveForecast
from controlplane.serverless.forecast_prewarm import (
    ForecastPrewarmConfig,
    arrival_counts,
    instances_needed,
    next_bin_forecast,
)
from controlplane.serverless.keepalive import make_policy
from controlplane.serverless.synthetic import SyntheticConfig, generate_workload

SEASONAL = ForecastPrewarmConfig(forecaster="seasonal")


@pytest.mark.parametrize("seed", [3, 11])
def test_bin_by_bin_it_decides_what_the_simulator_plans(seed: int) -> None:
    """Arrivals fed in time order, a decision at each bin's start: the same functions and the same
    instance counts as the simulator's plan over the whole trace (seasonal forecaster)."""
    w = generate_workload(SyntheticConfig(functions=30, hours=3), seed=seed)
    counts = arrival_counts(w, SEASONAL.bin_s)
    planned = instances_needed(next_bin_forecast(counts, SEASONAL), np.zeros_like(counts), SEASONAL)
    live = LiveForecast(SEASONAL)
    live.arm(0.0)
    arrivals = sorted((t, f.function_id) for f in w.functions for t in f.arrivals_s)
    names = [f.function_id for f in w.functions]
    i = 0
    compared = 0
    for m in range(1, counts.shape[1]):
        start = m * SEASONAL.bin_s
        while i < len(arrivals) and arrivals[i][0] < start:
            live.observe(arrivals[i][1], arrivals[i][0])
            i += 1
        got = {name: n for name, n, hold in live.decide(start + 0.001, lambda _: 0.0)}
        want = {names[k]: int(planned[k, m]) for k in np.flatnonzero(planned[:, m])}
        assert got == want, f"bin {m}"
        compared += len(want)
    assert compared > 100  # the trace has pre-warms to compare


def test_a_decision_holds_to_the_bins_end_and_the_likeliest_come_first() -> None:
    live = LiveForecast(ForecastPrewarmConfig(forecaster="seasonal", bin_s=10.0, period_bins=6))
    live.arm(0.0)
    for b in range(6):
        for _ in range(5):
            live.observe("busy", b * 10 + 1)
        live.observe("steady", b * 10 + 2)
    live.observe("once", 3.0)
    decisions = live.decide(62.5, lambda _: 0.0)
    assert [d[0] for d in decisions] == ["busy", "steady"]  # "once" decayed below the threshold
    assert all(d[1] == 1 and d[2] == pytest.approx(7.5) for d in decisions)


def test_multi_asks_for_the_instances_the_forecast_arrivals_would_overlap() -> None:
    config = ForecastPrewarmConfig(forecaster="seasonal", bin_s=10.0, period_bins=6, multi=True)
    live = LiveForecast(config)
    live.arm(0.0)
    for b in range(6):
        for _ in range(6):
            live.observe("busy", b * 10 + 1)
    # 6 arrivals a 10 s bin, each running 5 s: 1 + round(6 * 0.5) = 4 (the cap); 0.5 s: 1 + 0.
    assert live.decide(60.1, lambda _: 5.0) == [("busy", 4, pytest.approx(9.9))]
    assert live.decide(60.2, lambda _: 0.5) == [("busy", 1, pytest.approx(9.8))]


def test_it_counts_nothing_until_armed_and_keeps_a_bounded_history() -> None:
    live = LiveForecast(SEASONAL)
    live.observe("f", 5.0)  # the simulator feeds every policy: it plans from the trace instead
    assert live.history(600.0)[0] == []
    live.arm(0.0)
    for b in range(5 * live.keep_bins):
        live.observe("f", b * 60.0 + 1)
    assert len(live._counts["f"]) <= live.keep_bins + 1
    names, history = live.history(5 * live.keep_bins * 60.0)
    assert names == ["f"] and history.shape == (1, live.keep_bins) and (history == 1).all()


def test_an_arrival_out_of_order_lands_in_its_own_bin() -> None:
    live = LiveForecast(SEASONAL)
    live.arm(0.0)
    live.observe("f", 10.0)
    live.observe("f", 130.0)
    live.observe("f", 70.0)  # a replayed arrival fed after a live one
    live.observe("f", 15.0)
    assert live.history(180.0)[1].tolist() == [[2.0, 1.0, 1.0]]


def test_the_learned_forecaster_decides_only_once_fitted() -> None:
    config = ForecastPrewarmConfig(bin_s=1.0, period_bins=10, fit_bins=120)
    live = LiveForecast(config)
    live.arm(0.0)
    for b in range(200):
        live.observe("every-bin", b + 0.5)
        if b % 10 == 0:
            live.observe("every-tenth", b + 0.5)
    assert not live.fit_due(100.0) and live.decide(100.0, lambda _: 0.0) == []
    assert live.fit_due(120.0)
    history = live.fitting(120.0)
    assert not live.fit_due(120.5)  # the span counts as fitted from the start of its fit
    live.use(live.fit(history))
    assert not live.fit_due(121.0) and live.fit_due(240.0)  # again fit_bins later
    got = {name for name, _, _ in live.decide(200.001, lambda _: 0.0)}
    assert "every-bin" in got and "every-tenth" in got  # bin 200 is a tenth bin
    got = {name for name, _, _ in live.decide(201.001, lambda _: 0.0)}
    assert got == {"every-bin"}


def test_the_policy_feeds_its_live_forecast_and_a_copy_carries_the_counts() -> None:
    policy = make_policy("edgeplane-forecast-seasonal")
    assert policy.live_forecast is not None
    assert all(make_policy(n).live_forecast is None for n in ("edgeplane", "hybrid", "fixed-10m"))
    policy.live_forecast.arm(0.0)
    policy.observe_invocation("f", 5.0, 0.1)
    replayed = copy.deepcopy(policy)  # the hub's keep-alive replay works on a copy
    assert replayed.live_forecast is not None
    replayed.observe_invocation("f", 6.0, 0.1)
    assert replayed.live_forecast.history(60.0)[1].tolist() == [[2.0]]
    assert policy.live_forecast.history(60.0)[1].tolist() == [[1.0]]


def test_the_hub_refuses_the_learned_forecast_without_scikit_learn_in_one_line(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` fail
    argv = ["serve", "--function-policy", "edgeplane-forecast", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--function-policy" in err and "pip install" in err, err
