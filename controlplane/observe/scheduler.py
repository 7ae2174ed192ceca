"""kube-scheduler's metrics, under ``edgeplane_scheduler_``, fed by the scheduling framework."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane.scheduling.instrument import DEFAULT_PLUGIN_SAMPLE_RATE

__all__ = ["PREFIX", "SchedulerMetrics"]

PREFIX = "edgeplane_scheduler_"

# kube-scheduler's buckets: attempts 1 ms .. 16 s, extension points 0.1 ms .. 0.2 s,
# plugins 10 us .. 22 ms (ExponentialBuckets(start, factor, count)).
_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
_POINT_BUCKETS = tuple(0.0001 * 2**i for i in range(12))
_PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))


class SchedulerMetrics:
    """A :class:`~controlplane.scheduling.instrument.FrameworkRecorder` into a registry.

    Labelled children are cached by their label values: ``labels()`` takes a lock and hashes its
    arguments on every call, and the extension points are recorded on every cycle.
    """

    def __init__(
        self, registry: CollectorRegistry, *, plugin_sample_rate: float = DEFAULT_PLUGIN_SAMPLE_RATE
    ) -> None:
        self.plugin_sample_rate = plugin_sample_rate
        self.attempts = Counter(
            PREFIX + "schedule_attempts",
            "Scheduling attempts (one per workload placement call), by result and profile",
            ["result", "profile"],
            registry=registry,
        )
        self.attempt_duration = Histogram(
            PREFIX + "scheduling_attempt_duration_seconds",
            "Duration of a scheduling attempt (all its replicas' cycles, commit included)",
            ["result", "profile"],
            buckets=_ATTEMPT_BUCKETS,
            registry=registry,
        )
        self.pending = Gauge(
            PREFIX + "pending_placements",
            "Replicas waiting for a node, by queue (unschedulable: the last round found no fit)",
            ["queue"],
            registry=registry,
        )
        self.point_duration = Histogram(
            PREFIX + "framework_extension_point_duration_seconds",
            "Latency of an extension point of a scheduling cycle",
            ["extension_point", "status", "profile"],
            buckets=_POINT_BUCKETS,
            registry=registry,
        )
        self.plugin_duration = Histogram(
            PREFIX + "plugin_execution_duration_seconds",
            "Duration of one plugin at one extension point (a sample of the cycles)",
            ["plugin", "extension_point", "status"],
            buckets=_PLUGIN_BUCKETS,
            registry=registry,
        )
        self._attempt_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self._point_children: dict[tuple[str, str, str], Histogram] = {}
        self._plugin_children: dict[tuple[str, str, str], Histogram] = {}
        self.pending.labels("unschedulable").set(0)

    def schedule_attempt(self, profile: str, result: str, seconds: float) -> None:
        key = (result, profile)
        children = self._attempt_children.get(key)
        if children is None:
            children = self._attempt_children[key] = (
                self.attempts.labels(*key),
                self.attempt_duration.labels(*key),
            )
        children[0].inc()
        children[1].observe(seconds)

    def extension_point(self, profile: str, point: str, status: str, seconds: float) -> None:
        key = (point, status, profile)
        child = self._point_children.get(key)
        if child is None:
            child = self._point_children[key] = self.point_duration.labels(*key)
        child.observe(seconds)

    def plugin_execution(self, plugin: str, point: str, status: str, seconds: float) -> None:
        key = (plugin, point, status)
        child = self._plugin_children.get(key)
        if child is None:
            child = self._plugin_children[key] = self.plugin_duration.labels(*key)
        child.observe(seconds)

    def set_pending(self, queue: str, replicas: int) -> None:
        self.pending.labels(queue).set(replicas)
