"""The arrival sequence: seeded, generated once and replayed identically for every scheduler.

Arrivals of each class are a non-homogeneous Poisson process (thinning) whose rate follows a
diurnal sine (peak at ``diurnal_peak_hour``) and, for bursty classes, burst windows of
``burst_multiplier`` times the rate that start as a Poisson process of ``bursts_per_day``.
Runtimes are lognormal; everything is drawn from one ``numpy.random.Generator`` seeded with the
run's seed, in a fixed order, so the same seed gives the same tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import WorkloadRequest
from controlplane.sim.presets import GB, Preset, WorkloadClass

__all__ = ["ESTIMATE_ERROR", "TaskSpec", "burst_windows", "generate_tasks", "rate_factor"]

ESTIMATE_ERROR = 0.2


@dataclass(slots=True)
class TaskSpec:
    """One workload arrival and its hidden truth (nominal runtime per replica)."""

    id: str
    cls: str
    kind: str
    arrival_s: float
    request: WorkloadRequest
    runtime_s: float
    sla_s: float | None
    patience_s: float | None
    large_gpu: bool
    data_node_index: int | None
    measured: bool


def rate_factor(preset: Preset, t: float, bursts: list[tuple[float, float]], cls: WorkloadClass) -> float:
    """Rate multiplier at sim time ``t`` (seconds since the run's start)."""
    factor = 1.0
    if cls.diurnal:
        hour = (preset.start_hour + t / 3600.0) % 24.0
        factor *= 1.0 + preset.diurnal_amplitude * math.cos(
            2 * math.pi * (hour - preset.diurnal_peak_hour) / 24.0
        )
    if cls.bursty:
        for start, end in bursts:
            if start <= t < end:
                factor *= preset.burst_multiplier
                break
    return factor


def _draw_bursts(rng: np.random.Generator, preset: Preset, horizon: float) -> list[tuple[float, float]]:
    # The first draws of a run's generator: burst windows, a Poisson process of starts.
    bursts: list[tuple[float, float]] = []
    t = 0.0
    rate = preset.bursts_per_day / 86400.0
    while rate > 0:
        t += float(rng.exponential(1.0 / rate))
        if t >= horizon:
            break
        bursts.append((t, t + preset.burst_minutes * 60.0))
    return bursts


def burst_windows(preset: Preset, hours: float, seed: int) -> list[tuple[float, float]]:
    """The burst windows ``(start_s, end_s)`` of :func:`generate_tasks` for the same arguments.

    For measuring outcomes during bursts (a bench, a report); a scheduler is never told them."""
    return _draw_bursts(np.random.default_rng(seed), preset, preset.warmup_s + hours * 3600.0)


def _choice(rng: np.random.Generator, options: tuple[tuple[object, float], ...]) -> object:
    values = [o[0] for o in options]
    weights = np.array([o[1] for o in options], dtype=np.float64)
    return values[int(rng.choice(len(values), p=weights / weights.sum()))]


def generate_tasks(
    preset: Preset,
    hours: float,
    seed: int,
    *,
    data_nodes: list[str],
    estimate_error: float = ESTIMATE_ERROR,
) -> list[TaskSpec]:
    """All arrivals of a run: warm-up plus ``hours`` of measured time, sorted by arrival.

    ``estimate_error``: the lognormal sigma of runtime estimates (a physics seed draws it; the
    same draws of the arrival ``seed`` are scaled by it, so arrivals stay identical)."""
    rng = np.random.default_rng(seed)
    horizon = preset.warmup_s + hours * 3600.0
    bursts = _draw_bursts(rng, preset, horizon)
    peak_factor = (1.0 + preset.diurnal_amplitude) * preset.burst_multiplier
    tasks: list[TaskSpec] = []
    for cls in preset.classes:
        lam_max = cls.rate_per_hour / 3600.0 * peak_factor
        if lam_max <= 0:
            continue
        t = 0.0
        n = 0
        while True:
            t += float(rng.exponential(1.0 / lam_max))
            if t >= horizon:
                break
            accept = float(rng.random())
            if accept * peak_factor > rate_factor(preset, t, bursts, cls):
                continue
            n += 1
            tasks.append(_make_task(rng, preset, cls, f"{cls.name}-{n}", t, data_nodes, estimate_error))
    tasks.sort(key=lambda task: (task.arrival_s, task.id))
    for task in tasks:
        task.measured = task.arrival_s >= preset.warmup_s
    return tasks


def _make_task(
    rng: np.random.Generator,
    preset: Preset,
    cls: WorkloadClass,
    task_id: str,
    t: float,
    data_nodes: list[str],
    estimate_error: float = ESTIMATE_ERROR,
) -> TaskSpec:
    cpu = float(cls.cpu[int(rng.integers(len(cls.cpu)))])
    memory = int(float(cls.memory_gb[int(rng.integers(len(cls.memory_gb)))]) * GB)
    mig: list[str] = []
    if cls.mig:
        mig = [str(_choice(rng, cls.mig))]
    dpu = 1 if cls.dpu_probability and float(rng.random()) < cls.dpu_probability else 0
    replicas = int(str(_choice(rng, cls.replicas)))
    if dpu:
        replicas = 1
    runtime = float(cls.runtime_median_s * math.exp(cls.runtime_sigma * float(rng.standard_normal())))
    runtime = min(runtime, cls.runtime_median_s * 8)
    # The submitter's (or a predictor's) estimate of this task's runtime: the truth with
    # lognormal error (20 % in the reference physics). The SLA is set from it, and it is all the
    # scheduler is told.
    expected = runtime * math.exp(estimate_error * float(rng.standard_normal()))
    sla = cls.sla_factor * expected + cls.sla_slack_s if cls.sla_factor is not None else None
    data_node: int | None = None
    data_bytes = 0
    location: str | None = None
    if cls.data_gb[1] > 0 and data_nodes:
        data_node = int(rng.integers(len(data_nodes)))
        data_bytes = int(float(rng.uniform(*cls.data_gb)) * GB)
        location = data_nodes[data_node]
    if cls.origin_regions:
        location = cls.origin_regions[int(rng.integers(len(cls.origin_regions)))]
        if cls.data_gb[1] > 0:
            data_node = None
    request = WorkloadRequest(
        id=task_id,
        name=cls.name,
        resources=ResourceRequest(cpu=cpu, memory=memory, gpu=cls.gpu, mig=mig, dpu=dpu),
        replicas=replicas,
        priority=cls.priority,
        gang=cls.gang and replicas > 1,
        kind=cls.kind,
        sla_latency_s=sla,
        data_location=location,
        data_bytes=data_bytes,
        expected_runtime_s=expected,
    )
    return TaskSpec(
        id=task_id,
        cls=cls.name,
        kind=cls.kind,
        arrival_s=t,
        request=request,
        runtime_s=runtime,
        sla_s=sla,
        patience_s=cls.patience_s,
        large_gpu=cls.large_gpu,
        data_node_index=data_node,
        measured=False,
    )
