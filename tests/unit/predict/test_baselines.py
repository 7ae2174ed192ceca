"""Baselines on synthetic series: exact values, causality, bad input, and no scikit-learn needed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from controlplane.predict import (
    as_history,
    ewma,
    mae,
    mape,
    naive,
    seasonal_baseline,
    seasonal_lag,
    seasonal_naive,
    seasonal_profile,
    wape,
)


def test_naive_is_the_last_value_at_every_horizon():
    y = np.array([[1.0, 4.0, 2.0, 7.0]])
    assert naive(y, 1).tolist() == y.tolist()
    assert naive(y, 5).tolist() == y.tolist()


@pytest.mark.parametrize(("h", "p", "lag"), [(1, 4, 3), (4, 4, 0), (5, 4, 3), (15, 60, 45), (8, 4, 0)])
def test_seasonal_lag_reaches_the_latest_bin_of_the_targets_phase(h, p, lag):
    assert seasonal_lag(h, p) == lag
    assert (lag + h) % p == 0


def test_seasonal_naive_repeats_the_last_season():
    y = np.arange(12, dtype=float)  # period 4: target t+1 comes from t+1-4
    f = seasonal_naive(y, 1, 4)
    assert np.isnan(f[0, :3]).all()
    assert f[0, 3:].tolist() == [0.0, 1, 2, 3, 4, 5, 6, 7, 8]
    # A perfectly periodic series is forecast exactly at every horizon.
    s = np.tile([0.0, 5, 1, 9], 6)
    for h in (1, 3, 4, 7):
        g = seasonal_naive(s, h, 4)[0]
        ok = np.isfinite(g[: len(s) - h])
        assert np.array_equal(g[: len(s) - h][ok], s[h:][ok])


def test_ewma_matches_the_recurrence():
    y = [2.0, 4.0, 0.0, 8.0]
    alpha, level = 0.5, 2.0
    expected = []
    for v in y:
        level = alpha * v + (1 - alpha) * level
        expected.append(level)
    assert ewma(y, 3, alpha)[0].tolist() == pytest.approx(expected)


def test_seasonal_profile_averages_past_seasons_at_the_phase():
    y = np.array([1.0, 0, 3, 0, 5, 0])  # period 2: phase 0 holds 1, 3, 5
    f = seasonal_profile(y, 2, 2, seasons=2)[0]
    # Origin 4 forecasts bin 6 (phase 0) from bins 4 and 2.
    assert f[4] == pytest.approx(4.0)
    assert f[2] == pytest.approx(2.0)  # bins 2 and 0
    assert f[0] == pytest.approx(1.0)  # only bin 0 seen so far


def test_seasonal_baseline_blends_profile_and_level():
    y = np.tile([0.0, 10.0], 10)
    only_profile = seasonal_baseline(y, 1, 2, weight=1.0, seasons=1)[0]
    assert np.array_equal(only_profile[1:-1], y[2:])
    only_level = seasonal_baseline(y, 1, 2, weight=0.0, alpha=0.3)
    assert np.allclose(only_level, ewma(y, 1, 0.3))


def test_forecasts_never_look_ahead():
    rng = np.random.default_rng(0)
    y = rng.poisson(5, size=(3, 50)).astype(float)
    z = y.copy()
    z[:, 30:] = 1000.0
    for f in (
        lambda a: naive(a, 5),
        lambda a: seasonal_naive(a, 5, 7),
        lambda a: ewma(a, 5, 0.2),
        lambda a: seasonal_baseline(a, 5, 7),
    ):
        assert np.array_equal(f(y)[:, :30], f(z)[:, :30], equal_nan=True)


def test_metrics_skip_zero_actuals_in_mape():
    actual, forecast = [0.0, 2.0, 4.0], [1.0, 1.0, 5.0]
    assert mae(actual, forecast) == pytest.approx(1.0)
    assert mape(actual, forecast) == pytest.approx((50.0 + 25.0) / 2)
    assert wape(actual, forecast) == pytest.approx(3.0 / 6.0 * 100)
    assert np.isnan(mape([0.0], [1.0]))


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([], "empty"),
        (np.zeros((3, 0)), "empty"),
        ([1.0, -2.0, 3.0], "negative count -2 at key 0, bin 1"),
        ([1.0, float("nan")], "NaN or infinite"),
        (np.zeros((2, 2, 2)), "3-D"),
        (["a", "b"], "not a numeric array"),
    ],
)
def test_bad_history_raises_value_error_naming_the_problem(history, problem):
    with pytest.raises(ValueError, match="history") as err:
        as_history(history)
    assert problem in str(err.value)
    with pytest.raises(ValueError, match=problem):
        seasonal_baseline(history, 1, 4)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: naive([1.0], 0), "horizon"),
        (lambda: seasonal_naive([1.0], 1, 0), "period"),
        (lambda: ewma([1.0], 1, 0.0), "alpha"),
        (lambda: seasonal_baseline([1.0], 1, 2, weight=1.5), "weight"),
        (lambda: seasonal_profile([1.0], 1, 2, seasons=0), "seasons"),
    ],
)
def test_bad_parameters_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_imports_without_scikit_learn_and_names_the_extra():
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import controlplane.predict as p\n"
        "assert p.seasonal_baseline([1.0, 2.0, 3.0], 1, 2).shape == (1, 3)\n"
        "try:\n"
        "    p.LoadPredictor(1, 2).fit([1.0, 2.0, 3.0])\n"
        "except p.PredictDependencyError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert "pip install -e '.[predict]'" in out.stdout
