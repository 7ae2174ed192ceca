"""Timing the framework's extension points and plugins for whoever records them (the hub's metrics).

The scheduler knows nothing of Prometheus: it reports to a :class:`FrameworkRecorder`. With one,
:func:`instrument` replaces a :class:`~.plugin_set.PluginSet`'s plugins in place by timing proxies,
so the cycle code (``cycle.py``, ``commit.py``, ``placement.py``) runs unchanged and a scheduler
without a recorder pays nothing.

What is measured, as kube-scheduler does:

* every cycle, each extension point: from the start of its first plugin to the end of the call
  after which the cycle's loop stops (the last plugin; or the first PreFilter/Reserve that fails,
  the first Bind that does not skip). Score ends after the last scorer's normalisation. Each
  PostFilter call is a point of its own (the loop re-runs the cycle between them). Work the core
  does between plugins (the built-in resource mask) is outside every point.
* in a sample of cycles only (``plugin_sample_rate``, kube's 10 %), each plugin call: reading
  the clock is cheap, recording a labelled histogram less so, and the sample keeps the hot path
  fast. The draw has its own random stream: the scheduler's tie-breaks stay as seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from controlplane.scheduling.framework import (
    BindPlugin,
    Code,
    CycleState,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    Rejection,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
    Status,
)

if TYPE_CHECKING:
    from controlplane.scheduling.actions import Candidates
    from controlplane.scheduling.framework import FilterPlugin, FloatArray
    from controlplane.scheduling.model import Assignment, Decision, WorkloadRequest
    from controlplane.scheduling.nodetable import NodeTable
    from controlplane.scheduling.plugin_set import PluginSet

__all__ = ["DEFAULT_PLUGIN_SAMPLE_RATE", "FrameworkRecorder", "instrument", "status_label", "timed_attempt"]

DEFAULT_PLUGIN_SAMPLE_RATE = 0.1  # kube-scheduler's pluginMetricsSamplePercent (10)

_SAMPLED = "metrics/sampled"
_STARTED = "metrics/started/"

# kube-scheduler's status strings (framework.Code.String()).
_STATUS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.SKIP: "Skip",
}


def status_label(code: Code) -> str:
    return _STATUS.get(code, code.name.title().replace("_", ""))


class FrameworkRecorder(Protocol):
    """What receives the scheduler's timings (seconds)."""

    plugin_sample_rate: float

    def schedule_attempt(self, profile: str, result: str, seconds: float) -> None:
        """One ``Scheduler.schedule`` call that ran cycles: ``scheduled``, ``unschedulable`` or ``error``."""

    def extension_point(self, profile: str, point: str, status: str, seconds: float) -> None: ...

    def plugin_execution(self, plugin: str, point: str, status: str, seconds: float) -> None: ...


class _Timing:
    """What one plugin set's proxies share: the recorder, the profile and the sampling draw."""

    __slots__ = ("profile", "rate", "recorder", "rng")

    def __init__(self, recorder: FrameworkRecorder, profile: str) -> None:
        self.recorder = recorder
        self.profile = profile
        self.rate = recorder.plugin_sample_rate
        self.rng = random.Random(0x5EED)

    def sampled(self, state: CycleState) -> bool:
        flag = state.get(_SAMPLED)
        if flag is None:
            flag = self.rng.random() < self.rate
            state.write(_SAMPLED, flag)
        return bool(flag)

    def begin(self, state: CycleState, point: str, first: bool) -> float:
        now = perf_counter()
        if first:
            state.write(_STARTED + point, now)
        return now

    def end(
        self, state: CycleState, plugin: str, point: str, started: float, status: str, *, ends_point: bool
    ) -> None:
        now = perf_counter()
        if self.sampled(state):
            self.recorder.plugin_execution(plugin, point, status, now - started)
        if ends_point:
            begun = state.get(_STARTED + point)
            if begun is not None:
                self.recorder.extension_point(self.profile, point, status, now - begun)


class _Proxy:
    """A plugin seen through a timer; everything but the timed methods is the plugin's own."""

    def __init__(self, inner: Any, timing: _Timing, *, first: bool, last: bool) -> None:
        self.inner = inner
        self.name: str = getattr(inner, "name", type(inner).__name__)
        self.timing = timing
        self.first = first
        self.last = last
        self.edge = first or last  # it opens or may close its point: it always reads the clock

    def untimed(self, state: CycleState) -> bool:
        """A plugin between the first and the last of its point, in a cycle outside the sample:
        nothing to measure (the common case, kept to a dictionary lookup)."""
        return not self.edge and not self.timing.sampled(state)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


class _PreFilter(_Proxy):
    def pre_filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> Status:
        timed = not self.untimed(state)
        started = self.timing.begin(state, "PreFilter", self.first) if timed else 0.0
        status: Status = self.inner.pre_filter(state, request, nodes)
        if timed or not status.ok:  # a failure ends the point wherever it happens
            label = status_label(status.code)
            self.timing.end(
                state, self.name, "PreFilter", started, label, ends_point=self.last or not status.ok
            )
        return status


class _Filter(_Proxy):
    def filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> list[Rejection]:
        if self.untimed(state):
            untimed: list[Rejection] = self.inner.filter(state, request, nodes)
            return untimed
        started = self.timing.begin(state, "Filter", self.first)
        rejections: list[Rejection] = self.inner.filter(state, request, nodes)
        # Rejections are per node (arrays), not a failure of the point: the point succeeded.
        self.timing.end(state, self.name, "Filter", started, "Success", ends_point=self.last)
        return rejections


class _PostFilter(_Proxy):
    def post_filter(
        self, state: CycleState, request: WorkloadRequest, nodes: NodeTable, unresolvable: Any
    ) -> PostFilterResult:
        started = self.timing.begin(state, "PostFilter", True)
        result: PostFilterResult = self.inner.post_filter(state, request, nodes, unresolvable)
        label = status_label(result.status.code)
        self.timing.end(state, self.name, "PostFilter", started, label, ends_point=True)
        return result


class _Score(_Proxy):
    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        if self.untimed(state):
            untimed: FloatArray = self.inner.score(state, request, cand)
            return untimed
        started = self.timing.begin(state, "Score", self.first)
        raw: FloatArray = self.inner.score(state, request, cand)
        self.timing.end(state, self.name, "Score", started, "Success", ends_point=self.last)
        return raw


class _Normalize(_Proxy):
    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        if self.untimed(state):
            untimed: FloatArray = self.inner.normalize(state, raw)
            return untimed
        started = perf_counter()
        norm: FloatArray = self.inner.normalize(state, raw)
        timing = self.timing
        now = perf_counter()
        if timing.sampled(state):
            timing.recorder.plugin_execution(self.name, "ScoreExtensionNormalize", "Success", now - started)
        if self.last:  # the last scorer's normalisation closes the Score point
            begun = state.get(_STARTED + "Score")
            if begun is not None:
                timing.recorder.extension_point(timing.profile, "Score", "Success", now - begun)
        return norm


class _Reserve(_Proxy):
    def reserve(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> Status:
        started = self.timing.begin(state, "Reserve", self.first)
        status = self.inner.reserve(state, request, replica, node, assignment)
        label = status_label(status.code)
        self.timing.end(state, self.name, "Reserve", started, label, ends_point=self.last or not status.ok)
        return status

    def unreserve(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> None:
        started = perf_counter()
        self.inner.unreserve(state, request, replica, node, assignment)
        if self.timing.sampled(state):
            self.timing.recorder.plugin_execution(self.name, "Unreserve", "Success", perf_counter() - started)


class _Bind(_Proxy):
    def bind(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> Status:
        started = self.timing.begin(state, "Bind", self.first)
        status = self.inner.bind(state, request, replica, node, assignment)
        ends = self.last or status.code != Code.SKIP
        self.timing.end(state, self.name, "Bind", started, status_label(status.code), ends_point=ends)
        return status


def _wrap(plugins: list[Any], proxy: type[_Proxy], timing: _Timing) -> list[Any]:
    n = len(plugins)
    return [proxy(p, timing, first=i == 0, last=i == n - 1) for i, p in enumerate(plugins)]


def instrument(plugins: PluginSet, recorder: FrameworkRecorder, profile: str) -> None:
    """Put timing proxies in place of ``plugins``' extension-point lists (in place: the cycle
    runner and the placer hold this same object). The capability lists (explainers) and what was
    read from the plugins at build time stay as they are."""
    timing = _Timing(recorder, profile)
    pre_filters: list[PreFilterPlugin] = _wrap(plugins.pre_filters, _PreFilter, timing)
    filters: list[FilterPlugin] = _wrap(plugins.filters, _Filter, timing)
    post_filters: list[PostFilterPlugin] = [
        _PostFilter(p, timing, first=True, last=True) for p in plugins.post_filters
    ]
    reservers: list[ReservePlugin] = _wrap(plugins.reservers, _Reserve, timing)
    binders: list[BindPlugin] = _wrap(plugins.binders, _Bind, timing)
    scorers: list[tuple[ScorePlugin, float, ScoreNormalizer | None]] = []
    n = len(plugins.scorers)
    for i, (plugin, weight, normalizer) in enumerate(plugins.scorers):
        last = i == n - 1
        scorer: Any = _Score(plugin, timing, first=i == 0, last=last and normalizer is None)
        norm: Any = None if normalizer is None else _Normalize(normalizer, timing, first=False, last=last)
        scorers.append((scorer, weight, norm))
    plugins.pre_filters[:] = pre_filters
    plugins.filters[:] = filters
    plugins.post_filters[:] = post_filters
    plugins.reservers[:] = reservers
    plugins.binders[:] = binders
    plugins.scorers[:] = scorers


def timed_attempt(recorder: FrameworkRecorder, profile: str, place: Callable[[], Decision]) -> Decision:
    """``place()`` (one ``Scheduler.schedule`` that runs cycles) counted as one scheduling attempt:
    ``scheduled`` when every replica asked for was placed, ``unschedulable`` when some fit nowhere,
    ``error`` when a plugin failed or raised (kube-scheduler's results)."""
    started = perf_counter()
    try:
        decision = place()
    except Exception:
        recorder.schedule_attempt(profile, "error", perf_counter() - started)
        raise
    status = decision.status
    if status.ok:
        result = "scheduled"
    elif status.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
        result = "unschedulable"
    else:
        result = "error"
    recorder.schedule_attempt(profile, result, perf_counter() - started)
    return decision
