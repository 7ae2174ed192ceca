"""A seeded synthetic workload shaped like the public Azure Functions 2019 trace.

Shapes follow the characterisation in Shahrad et al., "Serverless in the Wild" (USENIX ATC
2020); the numbers are our reading of its figures, not fitted to a file:

* a mix of invocation patterns: timer-periodic (cron-like, periods from 1 minute to 4 hours),
  Poisson with a diurnal swing, bursty (quiet periods, then a burst of near-simultaneous
  invocations that needs several instances at once) and rare (a handful a day);
* skewed popularity: daily invocations log-normal over orders of magnitude, log10 ~ N(1.6,
  1.77), which puts about 45 % of functions at most once an hour and 81 % at most once a
  minute (the paper's Figure 5); capped so a generated day stays quick to simulate;
* chained functions: a share of the rare/Poisson functions are only ever called by a parent
  function (an orchestration step), a few seconds after it, most of the time; this is the
  call-graph structure :class:`~controlplane.serverless.keepalive.CallGraphAdvisor` learns;
* execution times log-normal per function (median of function medians about 1 s, long tail,
  capped at the 10-minute function timeout), with per-invocation log-normal jitter;
* memory mostly 100-300 MB (log-normal, median 170 MB), a few larger functions.

Everything comes from ``numpy.random.default_rng(seed)`` and derived streams, so a seed gives
the same workload on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.serverless.traces import FloatArray, FunctionWorkload, Workload

__all__ = ["SyntheticConfig", "generate_workload"]

_PERIODS_MIN = np.array([1, 2, 5, 10, 15, 20, 30, 60, 120, 240], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """Shares of the patterns and the distributions' parameters (see the module docstring)."""

    functions: int = 200
    hours: float = 24.0
    share_timer: float = 0.30
    share_poisson: float = 0.30
    share_bursty: float = 0.20
    share_rare: float = 0.20
    chained_share: float = 0.25  # of the Poisson and rare functions
    chain_probability: float = 0.9
    chain_lag_s: tuple[float, float] = (1.0, 20.0)
    log10_per_day: tuple[float, float] = (1.6, 1.77)  # mean, sd of log10(invocations per day)
    max_per_day: float = 100_000.0
    rare_max_per_day: float = 24.0
    duration_median_s: float = 1.0
    duration_sigma: float = 2.0  # across functions (log-normal)
    duration_jitter_sigma: float = 0.5  # across one function's invocations
    max_duration_s: float = 600.0
    memory_median_mb: float = 170.0
    memory_sigma: float = 0.45

    def __post_init__(self) -> None:
        shares = (self.share_timer, self.share_poisson, self.share_bursty, self.share_rare)
        if any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-6:
            raise ValueError("pattern shares must be >= 0 and sum to 1")
        if self.functions < 1 or self.hours <= 0:
            raise ValueError("need functions >= 1 and hours > 0")


def generate_workload(config: SyntheticConfig | None = None, *, seed: int = 0) -> Workload:
    """Generate a workload; the same ``config`` and ``seed`` always give the same workload."""
    cfg = config or SyntheticConfig()
    horizon = cfg.hours * 3600.0
    root = np.random.default_rng(seed)
    kinds = root.choice(
        4,
        size=cfg.functions,
        p=[cfg.share_timer, cfg.share_poisson, cfg.share_bursty, cfg.share_rare],
    )
    mean, sd = cfg.log10_per_day
    per_day = np.minimum(10.0 ** root.normal(mean, sd, size=cfg.functions), cfg.max_per_day)
    streams = root.spawn(cfg.functions)
    arrivals: list[FloatArray] = []
    for i, kind in enumerate(kinds):
        rng = streams[i]
        rate = float(per_day[i]) / 86400.0  # per second
        if kind == 0:
            a = _timer(rng, horizon, rate)
        elif kind == 1:
            a = _poisson(rng, horizon, rate)
        elif kind == 2:
            a = _bursty(rng, horizon, rate)
        else:
            a = _rare(rng, horizon, min(rate, cfg.rare_max_per_day / 86400.0))
        arrivals.append(a)
    _chain(root, kinds, arrivals, horizon, cfg)

    functions = []
    for i in range(cfg.functions):
        rng = streams[i]
        a = arrivals[i]
        median = cfg.duration_median_s * float(np.exp(rng.normal(0.0, cfg.duration_sigma)))
        d = median * np.exp(rng.normal(0.0, cfg.duration_jitter_sigma, size=len(a)))
        d = np.clip(d, 0.001, cfg.max_duration_s)
        mem = float(np.clip(cfg.memory_median_mb * np.exp(rng.normal(0.0, cfg.memory_sigma)), 64, 2048))
        functions.append(FunctionWorkload(f"syn-{i:04d}-{'tpbr'[int(kinds[i])]}", mem, a, d))
    return Workload(f"synthetic:seed={seed}", horizon, functions)


def _timer(rng: np.random.Generator, horizon: float, rate: float) -> FloatArray:
    # The cron period nearest the drawn rate (1 minute .. 4 hours).
    period = float(_PERIODS_MIN[np.argmin(np.abs(np.log(_PERIODS_MIN * 60.0 * rate)))]) * 60.0
    phase = float(rng.uniform(0.0, period))
    t = np.arange(phase, horizon, period)
    # Cron fires on the period; a little start-up jitter (seconds) rides on it.
    return np.sort(np.clip(t + rng.normal(0.0, 1.0, size=len(t)), 0.0, horizon - 1e-6))


def _poisson(rng: np.random.Generator, horizon: float, rate: float) -> FloatArray:
    peak = rate * 1.5  # diurnal swing of +-50 %, by thinning a peak-rate process
    n = rng.poisson(peak * horizon)
    t = np.sort(rng.uniform(0.0, horizon, size=n))
    phase = rng.uniform(0.0, 2 * np.pi)
    keep = rng.random(n) < (1.0 + 0.5 * np.sin(2 * np.pi * t / 86400.0 + phase)) / 1.5
    return t[keep]


def _bursty(rng: np.random.Generator, horizon: float, rate: float) -> FloatArray:
    mean_size = 1.0 + float(rng.uniform(2.0, 20.0))  # invocations per burst
    bursts = rng.poisson(rate * horizon / mean_size)
    starts = np.sort(rng.uniform(0.0, horizon, size=bursts))
    sizes = 1 + rng.geometric(1.0 / mean_size, size=bursts)
    # A burst's invocations arrive within seconds of each other: several instances at once.
    t = np.repeat(starts, sizes) + rng.exponential(3.0, size=int(sizes.sum()))
    return np.sort(t[t < horizon])


def _rare(rng: np.random.Generator, horizon: float, rate: float) -> FloatArray:
    n = 1 + rng.poisson(rate * horizon)
    return np.sort(rng.uniform(0.0, horizon, size=n))


def _chain(
    rng: np.random.Generator,
    kinds: np.ndarray,
    arrivals: list[FloatArray],
    horizon: float,
    cfg: SyntheticConfig,
) -> None:
    """Turn some Poisson/rare functions into children called by a parent function."""
    candidates = [i for i, k in enumerate(kinds) if k in (1, 3)]
    children = [i for i in candidates if rng.random() < cfg.chained_share]
    parents_pool = [i for i in range(len(kinds)) if i not in set(children)]
    lo, hi = cfg.chain_lag_s
    for c in children:
        if not parents_pool:
            break
        # Prefer parents invoked no more than ~once a minute: a busier parent would make its
        # child busy too, and then it is an ordinary busy function.
        rates = np.array([len(arrivals[p]) for p in parents_pool], dtype=np.float64) / (horizon / 60.0)
        eligible = [p for p, r in zip(parents_pool, rates, strict=True) if 0 < r <= 1.0]
        if not eligible:
            continue
        parent = eligible[int(rng.integers(len(eligible)))]
        pa = arrivals[parent]
        called = pa[rng.random(len(pa)) < cfg.chain_probability]
        t = called + rng.uniform(lo, hi, size=len(called))
        arrivals[c] = np.sort(t[t < horizon])
