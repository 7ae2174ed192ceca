"""The synthetic workload has the public trace's shapes and is reproducible."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.serverless.synthetic import SyntheticConfig, generate_workload

CFG = SyntheticConfig(functions=300, hours=24)


def test_same_seed_same_workload_and_another_seed_differs() -> None:
    a = generate_workload(CFG, seed=3)
    b = generate_workload(CFG, seed=3)
    c = generate_workload(CFG, seed=4)
    assert [f.function_id for f in a.functions] == [f.function_id for f in b.functions]
    assert all(
        np.array_equal(x.arrivals_s, y.arrivals_s) for x, y in zip(a.functions, b.functions, strict=True)
    )
    assert any(
        len(x.arrivals_s) != len(y.arrivals_s) or not np.array_equal(x.arrivals_s, y.arrivals_s)
        for x, y in zip(a.functions, c.functions, strict=True)
    )


def test_has_every_pattern_and_skewed_popularity() -> None:
    w = generate_workload(CFG, seed=1)
    kinds = {f.function_id[-1] for f in w.functions}
    assert kinds == {"t", "p", "b", "r"}
    per_day = np.sort([len(f.arrivals_s) for f in w.functions])[::-1]
    assert per_day[: len(per_day) // 10].sum() > 0.8 * per_day.sum()  # top 10 % carry most
    assert np.mean(per_day <= 24) > 0.25  # many functions at most once an hour


def test_durations_and_memory_look_like_the_papers_figures() -> None:
    w = generate_workload(CFG, seed=1)
    medians = np.array([np.median(f.durations_s) for f in w.functions if len(f.durations_s)])
    assert 0.3 < np.median(medians) < 3.0
    assert np.percentile(medians, 95) > 10 * np.median(medians)  # long tail
    mem = np.array([f.memory_mb for f in w.functions])
    assert np.mean((mem >= 100) & (mem <= 300)) > 0.5


def test_timers_are_periodic_and_arrivals_stay_in_the_horizon() -> None:
    w = generate_workload(SyntheticConfig(functions=100, hours=6), seed=2)
    for f in w.functions:
        assert np.all(np.diff(f.arrivals_s) >= 0)
        assert f.arrivals_s.size == 0 or (f.arrivals_s[0] >= 0 and f.arrivals_s[-1] < w.horizon_s)
    timers = [f for f in w.functions if f.function_id.endswith("t") and len(f.arrivals_s) > 3]
    assert timers
    for f in timers:
        gaps = np.diff(f.arrivals_s)
        assert np.ptp(gaps) < 10.0  # a fixed period with seconds of jitter


def test_config_validates_shares() -> None:
    with pytest.raises(ValueError, match="shares"):
        SyntheticConfig(share_timer=0.9)
