"""The online bin forecast: levels, the season seen ahead, a burst already begun, bad input."""

from __future__ import annotations

import pytest

from controlplane.predict.online import OnlineBinForecast


def _feed(forecast: OnlineBinForecast, per_bin: list[float], *, bin_s: float, start: float = 0.0) -> float:
    """Each bin's amount arrives in its middle; returns the time after the last bin."""
    for i, amount in enumerate(per_bin):
        forecast.observe(start + (i + 0.5) * bin_s, amount)
    return start + len(per_bin) * bin_s


def test_a_steady_rate_is_forecast_as_that_rate() -> None:
    f = OnlineBinForecast(bin_s=60.0, period_s=3600.0)
    end = _feed(f, [120.0] * 20, bin_s=60.0)
    assert f.rate(end + 1.0) == pytest.approx(2.0, rel=1e-6)
    assert f.expected(end + 1.0, 30.0) == pytest.approx(60.0, rel=1e-6)
    assert f.closed_bins == 20


def test_the_season_raises_the_forecast_before_the_peak_arrives() -> None:
    # A 12-bin season, busy in bins 6 and 7: after three seasons, at the end of bin 5 of the
    # fourth (nothing of the peak seen yet) a horizon reaching into bin 6 expects it.
    season = [1.0] * 6 + [100.0, 100.0] + [1.0] * 4
    f = OnlineBinForecast(bin_s=300.0, period_s=3600.0)
    end = _feed(f, season * 3 + season[:5], bin_s=300.0)
    quiet = f.expected(end - 300.0 + 10.0, 60.0)  # early in bin 5, the horizon stays in it
    assert quiet < 1.0
    ahead = f.expected(end + 300.0 - 60.0, 120.0)  # a minute before bin 6: half the horizon in it
    assert ahead > 5.0  # ~half of 100/300 per s over 60 s from the profile, plus the level


def test_without_a_season_the_peak_is_not_anticipated() -> None:
    # The same arrivals without their history: nothing to anticipate, the forecast is the level.
    f = OnlineBinForecast(bin_s=300.0, period_s=3600.0)
    end = _feed(f, [1.0] * 5, bin_s=300.0)
    assert f.expected(end + 240.0, 120.0) < 1.0


def test_a_burst_already_begun_counts_within_the_open_bin() -> None:
    f = OnlineBinForecast(bin_s=300.0, period_s=3600.0)
    end = _feed(f, [3.0] * 10, bin_s=300.0)
    for k in range(80):  # 80 units in the first 80 s of the open bin
        f.observe(end + k, 1.0)
    assert f.rate(end + 80.0) == pytest.approx(1.0)  # 80 / 80 s, far above the level's 0.01/s
    # Before a quarter of the bin has passed, the stretch is too short to extrapolate.
    g = OnlineBinForecast(bin_s=300.0, period_s=3600.0)
    end = _feed(g, [3.0] * 10, bin_s=300.0)
    g.observe(end + 1.0, 50.0)
    assert g.rate(end + 10.0) == pytest.approx(0.01)


def test_bad_input_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="bin_s"):
        OnlineBinForecast(bin_s=0.0, period_s=60.0)
    with pytest.raises(ValueError, match="period_s"):
        OnlineBinForecast(bin_s=60.0, period_s=30.0)
    with pytest.raises(ValueError, match="weight"):
        OnlineBinForecast(bin_s=60.0, period_s=600.0, weight=2.0)
    f = OnlineBinForecast(bin_s=60.0, period_s=600.0)
    with pytest.raises(ValueError, match="amount"):
        f.observe(1.0, -1.0)
    with pytest.raises(ValueError, match="amount"):
        f.observe(1.0, float("nan"))
