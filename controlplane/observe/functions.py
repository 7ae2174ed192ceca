"""OpenWhisk's activation metrics (``openwhisk_action_*``), per function, under ``edgeplane_function_``.

Fed with each finished synchronous or asynchronous invocation's outcome: its status (``success``
or the error code the API answers), whether it cold-started, and the parts of its time the agent
measured (wait: queued for an instance, routing included; init: the cold start; duration: the
handler's run).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from controlplane.serverless.outcome import InvocationOutcome

__all__ = ["PREFIX", "FunctionMetrics"]

PREFIX = "edgeplane_function_"

# From a warm hit (milliseconds) to a slow cold start or a long handler (a minute).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class FunctionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.activations = Counter(
            PREFIX + "activations",
            "Function invocations that finished, by function and status (success or the error code)",
            ["function", "status"],
            registry=registry,
        )
        self.cold_starts = Counter(
            PREFIX + "cold_starts",
            "Invocations that started a new instance",
            ["function"],
            registry=registry,
        )
        self.wait_time = Histogram(
            PREFIX + "wait_time_seconds",
            "Time an invocation waited before its handler ran (routing and queueing, not the cold start)",
            ["function"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.init_time = Histogram(
            PREFIX + "init_time_seconds",
            "Cold start time: from spawning an instance to its handler being ready",
            ["function"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            PREFIX + "duration_seconds",
            "Time the handler ran",
            ["function"],
            buckets=_BUCKETS,
            registry=registry,
        )
        # The labelled children in use, by label values (a deleted function's stay: a few each).
        self._activations: dict[tuple[str, str], Any] = {}
        self._timings: dict[str, tuple[Any, Any]] = {}

    def observe(self, outcome: InvocationOutcome) -> None:
        function = outcome.function
        status = "success" if outcome.ok else str((outcome.error or {}).get("code") or "error")
        activations = self._activations.get((function, status))
        if activations is None:  # labels() takes a lock and a lookup: once per label set
            activations = self._activations[(function, status)] = self.activations.labels(function, status)
        activations.inc()
        if outcome.node is None:  # never reached a node (no capacity): no timings to speak of
            return
        if outcome.cold_start:
            self.cold_starts.labels(function).inc()
            self.init_time.labels(function).observe(outcome.cold_start_ms / 1000)
        timings = self._timings.get(function)
        if timings is None:
            timings = self._timings[function] = (
                self.wait_time.labels(function),
                self.duration.labels(function),
            )
        timings[0].observe(outcome.queue_ms / 1000)
        timings[1].observe(outcome.exec_ms / 1000)
