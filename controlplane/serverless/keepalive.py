"""Keep-alive and pre-warm policies for function instances.

One small interface serves both the offline simulator (:mod:`controlplane.serverless.funcsim`) and
the live hub: per-function state is updated incrementally, one invocation at a time, and every
query is O(1) amortised, so the hub can call it on its hot path.

Two Protocols:

* :class:`KeepAlivePolicy` decides, when an instance finishes an invocation, whether to keep it
  loaded (``keep_alive_s``) or to unload it and load it again ``prewarm_s`` later, just before the
  next invocation is predicted (the *window* of Shahrad et al.).
* :class:`PrewarmAdvisor` learns which functions follow which (a call graph, from co-occurrence
  of arrivals only) and names the functions to pre-warm when one is invoked.

A :class:`Policy` bundles one of each (the advisor is optional); :func:`make_policy` builds the
registered ones by name (:data:`POLICY_NAMES`). This module is that registry; the policies live
in :mod:`~controlplane.serverless.window` (the protocols), :mod:`~controlplane.serverless.fixed`,
:mod:`~controlplane.serverless.hybrid`, :mod:`~controlplane.serverless.burst` and
:mod:`~controlplane.serverless.callgraph`, and every name stays importable from here.

Policies:

``fixed-10m``
    Keep every instance 10 minutes after it goes idle (the Azure/OpenWhisk-style baseline).
``no-keepalive``
    Unload an instance as soon as it finishes.
``hybrid``
    The hybrid histogram policy of Shahrad et al., "Serverless in the Wild", USENIX ATC 2020:
    a per-function histogram of idle times (4 h range, 1-minute bins); the pre-warm window is
    the 5th percentile minus 10 %, the window ends at the 99th percentile plus 10 %; too little
    history or too flat a histogram (coefficient of variation of the bin counts below 2) falls
    back to a conservative keep-alive of the histogram range; when most idle times are beyond
    the range, a time-series forecast of them sets the window (the paper uses ARIMA; we use
    simple exponential smoothing, which is the optimal forecast of an ARIMA(0,1,1) process and
    is stable on the handful of samples a function has).
``edgeplane``
    ``hybrid`` (trusting a short history early when its idle times are all alike, i.e. a timer)
    with multi-instance rules: extra instances (burst capacity) are held through a long window
    only when the gaps between bursts are regular, else at most the baseline's 10 minutes; plus
    a reactive pool of standby instances after concurrency spikes (:class:`BurstPool`), a
    call-graph pre-warmer (:class:`CallGraphAdvisor`) and headroom: a spare instance started when
    an arrival takes the last free one and the next arrival is predicted to overlap
    (:class:`OverlapPredictor`). ``edgeplane-no-callgraph``, ``edgeplane-no-pool`` and
    ``edgeplane-no-headroom`` switch one extra off each, so its effect can be measured.
``edgeplane-forecast``
    ``edgeplane`` plus forecast pre-warming (:class:`ForecastPrewarmer` in the simulator,
    :class:`LiveForecast` in the hub): a
    minute whose forecast arrivals (the learned ``controlplane.predict.LoadPredictor``, fitted
    on the first 2/3 of the trace's minutes and used after them) give at least a 50% chance of
    one arrival starts with a free instance. ``edgeplane-forecast-multi`` asks for as many as
    the forecast arrivals would overlap; ``edgeplane-forecast-seasonal`` uses the numpy-only
    seasonal baseline instead, from the first minute. The learned ones need scikit-learn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from edgeplane_contract.errors import EdgeplaneError

from controlplane.serverless.burst import BurstPool, BurstPoolConfig, EdgeplaneKeepAlive
from controlplane.serverless.callgraph import CallGraphAdvisor, CallGraphConfig
from controlplane.serverless.fixed import FixedKeepAlive
from controlplane.serverless.forecast_live import LiveForecast
from controlplane.serverless.forecast_prewarm import ForecastPrewarmConfig, ForecastPrewarmer, LoadPrewarmer
from controlplane.serverless.headroom import HeadroomConfig, OverlapPredictor
from controlplane.serverless.hybrid import HybridConfig, HybridHistogramPolicy, IdleTimeHistogram
from controlplane.serverless.window import KeepAlivePolicy, PrewarmAdvisor, Window

__all__ = [
    "POLICY_NAMES",
    "BurstPool",
    "BurstPoolConfig",
    "CallGraphAdvisor",
    "CallGraphConfig",
    "EdgeplaneKeepAlive",
    "FixedKeepAlive",
    "ForecastPrewarmer",
    "HeadroomConfig",
    "HybridConfig",
    "HybridHistogramPolicy",
    "IdleTimeHistogram",
    "KeepAlivePolicy",
    "OverlapPredictor",
    "Policy",
    "PrewarmAdvisor",
    "UnknownPolicyError",
    "Window",
    "make_policy",
]


class UnknownPolicyError(EdgeplaneError, ValueError):
    """A policy name that is not in :data:`POLICY_NAMES`."""

    code = "unknown_policy"
    http_status = 422

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
        self.name = name


@dataclass(slots=True)
class Policy:
    """A keep-alive policy and, optionally, a pre-warm advisor, a headroom predictor and a
    forecast pre-warmer, under one name. The forecast has two faces on one config: ``forecast``
    plans over a whole workload's arrivals (the simulator), ``live_forecast`` decides bin by bin
    as arrivals come (the hub, once it arms it).

    The live hub calls :meth:`observe_invocation` on every invocation (in arrival order) and
    pre-warms the functions it returns, then asks :meth:`spare_hold_s` whether to start a spare
    instance of the invoked function; on every instance release it asks
    ``keepalive.release_window``.
    """

    name: str
    keepalive: KeepAlivePolicy
    advisor: PrewarmAdvisor | None = None
    headroom: OverlapPredictor | None = None
    forecast: LoadPrewarmer | None = None
    live_forecast: LiveForecast | None = None

    def observe_invocation(
        self, function_id: str, t_s: float, duration_s: float = 0.0, *, concurrency: int = 1
    ) -> tuple[str, ...]:
        """Feed every part; returns the functions to pre-warm now."""
        self.keepalive.observe_invocation(function_id, t_s, duration_s, concurrency=concurrency)
        if self.live_forecast is not None:
            self.live_forecast.observe(function_id, t_s)
        if self.headroom is not None:
            self.headroom.observe(function_id, t_s, duration_s, concurrency=concurrency)
        if self.advisor is None:
            return ()
        return self.advisor.observe_invocation(function_id, t_s)

    def spare_hold_s(self, function_id: str, *, free_instances: int) -> float:
        """After an arrival (observed): how long to hold a spare instance started now (0: none)."""
        if self.headroom is None:
            return 0.0
        return self.headroom.spare_hold_s(function_id, free_instances=free_instances)


def _edgeplane(
    name: str,
    *,
    call_graph: bool = True,
    pool: bool = True,
    headroom: bool = True,
    forecast: ForecastPrewarmConfig | None = None,
) -> Policy:
    hybrid = HybridHistogramPolicy(HybridConfig(early_span_bins=2), name=name)
    ka = EdgeplaneKeepAlive(hybrid, BurstPool() if pool else None, name=name)
    return Policy(
        name,
        ka,
        CallGraphAdvisor() if call_graph else None,
        OverlapPredictor(HeadroomConfig()) if headroom else None,
        ForecastPrewarmer(forecast) if forecast is not None else None,
        LiveForecast(forecast) if forecast is not None else None,
    )


_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fixed-10m": lambda: Policy("fixed-10m", FixedKeepAlive(600.0, name="fixed-10m")),
    "no-keepalive": lambda: Policy("no-keepalive", FixedKeepAlive(0.0, name="no-keepalive")),
    "hybrid": lambda: Policy("hybrid", HybridHistogramPolicy()),
    "edgeplane": lambda: _edgeplane("edgeplane"),
    "edgeplane-no-callgraph": lambda: _edgeplane("edgeplane-no-callgraph", call_graph=False),
    "edgeplane-no-pool": lambda: _edgeplane("edgeplane-no-pool", pool=False),
    "edgeplane-no-headroom": lambda: _edgeplane("edgeplane-no-headroom", headroom=False),
    "edgeplane-forecast": lambda: _edgeplane("edgeplane-forecast", forecast=ForecastPrewarmConfig()),
    "edgeplane-forecast-multi": lambda: _edgeplane(
        "edgeplane-forecast-multi", forecast=ForecastPrewarmConfig(multi=True)
    ),
    "edgeplane-forecast-seasonal": lambda: _edgeplane(
        "edgeplane-forecast-seasonal", forecast=ForecastPrewarmConfig(forecaster="seasonal")
    ),
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_policy(name: str) -> Policy:
    """A fresh policy (no learned state) by registry name; raises :class:`UnknownPolicyError`,
    or :class:`~controlplane.predict.PredictDependencyError` for a learned forecast policy
    without scikit-learn."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownPolicyError(name) from None
    return factory()
