"""The learned predictor: beats naive on seasonal data (synthetic and a real slice), is
deterministic, and checks its input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controlplane.predict import LoadPredictor, mae, naive, seasonal_baseline
from controlplane.serverless.traces import load_azure_trace

pytest.importorskip("sklearn")

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "azure_predict"


def _seasonal(keys: int = 8, days: int = 4, period: int = 96, seed: int = 0) -> np.ndarray:
    """Poisson counts around a daily sine, a different level per key."""
    rng = np.random.default_rng(seed)
    t = np.arange(days * period)
    level = rng.uniform(2, 40, size=(keys, 1))
    rate = level * (1.2 + np.sin(2 * np.pi * t / period))
    return rng.poisson(rate).astype(float)


def _test_mae(y: np.ndarray, path: np.ndarray, h: int, train_end: int) -> float:
    return mae(y[:, train_end:], path[:, train_end - h : y.shape[1] - h])


def test_beats_naive_on_a_clearly_seasonal_series():
    y, h, period = _seasonal(), 5, 96
    train_end = 3 * period
    model = LoadPredictor(h, period, seed=0).fit(y[:, :train_end])
    learned = _test_mae(y, model.predict_path(y), h, train_end)
    assert learned < 0.8 * _test_mae(y, naive(y, h), h, train_end)
    # The seasonal baseline alone (no scikit-learn) also beats naive here.
    seasonal = _test_mae(y, seasonal_baseline(y, h, period), h, train_end)
    assert seasonal < _test_mae(y, naive(y, h), h, train_end)


def test_beats_naive_on_the_real_fixture_slice_at_horizon_5():
    trace = load_azure_trace(FIXTURE)
    y = np.stack([f.per_minute for f in trace.functions]).astype(float)
    assert y.shape == (6, 1440)
    h, train_end = 5, 960  # train on hours 0-16, test on hours 16-24; hourly season (one day only)
    model = LoadPredictor(h, 60, seed=0).fit(y[:, :train_end])
    learned = _test_mae(y, model.predict_path(y), h, train_end)
    assert learned < 0.9 * _test_mae(y, naive(y, h), h, train_end)


def test_same_seed_same_forecasts_and_no_look_ahead():
    y = _seasonal(keys=4, days=3)
    a = LoadPredictor(3, 96, seed=1).fit(y[:, :200]).predict_path(y)
    b = LoadPredictor(3, 96, seed=1).fit(y[:, :200]).predict_path(y)
    assert np.array_equal(a, b)
    z = y.copy()
    z[:, 250:] = 500.0
    c = LoadPredictor(3, 96, seed=1).fit(y[:, :200]).predict_path(z)
    assert np.array_equal(a[:, :250], c[:, :250])
    assert (a >= 0).all()


def test_forecast_is_the_last_origin_and_ridge_works():
    y = _seasonal(keys=3, days=3)
    model = LoadPredictor(2, 96, model="ridge").fit(y)
    assert np.array_equal(model.forecast(y), model.predict_path(y)[:, -1])
    assert model.forecast(y).shape == (3,)


@pytest.mark.parametrize(
    ("history", "problem"),
    [([], "empty"), ([[1.0, 2.0, -1.0, 4.0]], "negative count"), ([1.0, 2.0], "need more than horizon")],
)
def test_bad_history_raises_value_error(history, problem):
    with pytest.raises(ValueError, match=problem):
        LoadPredictor(5, 4).fit(history)


def test_bad_settings_and_unfitted_use_raise_value_error():
    with pytest.raises(ValueError, match="horizon"):
        LoadPredictor(0, 4)
    with pytest.raises(ValueError, match="model"):
        LoadPredictor(1, 4, model="lstm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fit"):
        LoadPredictor(1, 4).predict_path([1.0, 2.0])
