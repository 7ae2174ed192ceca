"""Simulation presets: the fleet, the workload mix, and the physics knobs of each scenario.

* ``seed-200``: the articles' headline experiment. 150 CPU nodes (64 vCPU, 256 GB), 40 GPU
  nodes (64 vCPU, 512 GB, 2x A100-40GB; half of them with both GPUs in MIG mode), 10 DPU nodes
  (64 vCPU, 256 GB, 2 BlueField DPUs). Racks of 10 nodes. Mix: latency-sensitive ResNet50-like
  inference (CPU and MIG), LAMMPS-like MPI batch gangs, Spark-like analytics reading remote
  data, single-GPU training, and large-GPU-memory tasks (80 GB = 2 whole A100s on one node, or
  one 7g.40gb instance) whose schedulability is measured.
* ``multi-cluster``: 3 clusters in 3 regions (the shape of ``deploy/federation.yaml``), data
  living in one region per workload, inter-region latency and WAN bandwidth.
* ``edge-battery``: small edge boxes, half on solar + battery (mains only in daylight), a few
  mains-powered core nodes, short edge functions. Run ``edgeplane`` against ``edgeplane-fixed``
  (same profile, fixed weights) to compare battery-aware weighting.
* ``mig-fragmentation``: built to test the large-GPU schedulability claim (issue 13). 40 GPU
  nodes with both A100-40GB GPUs in MIG mode (the headline's GPU pool, all in MIG mode, 560
  compute slices); a churn of small slices (1g/2g/3g: short latency-sensitive inference and
  long-lived low-priority batch holding slices for ~20 min) beside a steady stream of large
  instances (a whole GPU as 7g.40gb, or 4g.20gb, which has a single legal position) that must
  start within 15 minutes. About 89% of the compute slices are offered, so a large request
  usually finds enough free slices in the fleet in total, and whether they sit in one legal
  position decides if it starts. CPU requests are small (the nodes stay below the contention
  knee) and there are no bursts and a flat day, so slice placement is what separates schedulers.

Every figure below is an input of the model, chosen before looking at results; the scheduler
never sees the "true" contention or network parameters, only its own models and samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

from controlplane.federation.config import FederationConfig, parse_federation

__all__ = [
    "PRESETS",
    "ContentionModel",
    "NodeGroup",
    "PhysicsFamily",
    "PowerManagerConfig",
    "Preset",
    "ScenarioView",
    "WorkloadClass",
    "get_preset",
    "lognormal_mean",
    "scale_load",
    "scale_preset",
    "scenario_view",
]

GB = 10**9


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A homogeneous group of nodes."""

    prefix: str
    count: int
    node_type: str
    cpu: float
    memory_gb: float
    gpus: int = 0
    mig_gpus: int = 0  # how many of the node's GPUs are in MIG mode
    dpus: int = 0
    cluster: str = "default"
    region: str = "local"
    rack_size: int = 10
    battery_fraction: float = 0.0  # share of the group's nodes on solar + battery
    battery_wh: float = 0.0
    charge_w: float = 0.0  # charging power while on mains/solar


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One kind of work: its arrival rate, shape, runtime, SLA and patience."""

    name: str
    kind: str
    rate_per_hour: float
    cpu: tuple[float, ...]
    memory_gb: tuple[float, ...]
    runtime_median_s: float
    runtime_sigma: float = 0.5
    gpu: int = 0
    mig: tuple[tuple[str, float], ...] = ()  # (profile, probability)
    dpu_probability: float = 0.0
    replicas: tuple[tuple[int, float], ...] = ((1, 1.0),)
    gang: bool = False
    priority: int = 0
    sla_factor: float | None = 2.0  # SLA = factor * the task's runtime estimate + slack
    sla_slack_s: float = 0.0
    patience_s: float | None = None  # give up if not started by then
    data_gb: tuple[float, float] = (0.0, 0.0)
    large_gpu: bool = False
    diurnal: bool = True
    bursty: bool = False
    origin_regions: tuple[str, ...] = ()


class PhysicsFamily(StrEnum):
    """The functional form of the hidden physics (docs/scheduling.md, "Hidden physics")."""

    KNEE = "knee"  # slowdown linear in CPU allocation above a knee (the reference)
    CONVEX_MEMBW = "convex-membw"  # slowdown convex in the node's memory-bandwidth demand
    PAIRWISE = "pairwise"  # slowdown from a matrix of class-pair effects
    NOISY_POWER = "noisy-power"  # knee interference; per-node nonlinear, noisy power curves


@dataclass(frozen=True, slots=True)
class ContentionModel:
    """The simulator's ground truth for interference (unknown to the schedulers).

    ``knee`` (and ``noisy-power``): a replica of contention sensitivity ``s`` on a node at CPU
    allocation ``u`` runs at rate ``1 / (1 + s * amplitude * max(0, u - knee) / (1 - knee))``;
    I/O-heavy replicas slow by a further ``io_penalty`` per other I/O-heavy replica on the node.
    ``convex-membw``: ``c = membw_amplitude * b ** membw_exponent`` replaces the knee, with ``b``
    the node's memory-bandwidth demand (each replica's CPU times its kind's ``membw``, over the
    node's CPU). ``pairwise``: a replica of kind A slows by ``1 + sum_B M[A, B] * cpu_B / cpu``
    over the CPU its neighbours of kind B hold (``pairwise`` lists ``(A, B, M)``); no knee, no
    I/O term, no sensitivity.
    """

    knee: float = 0.70
    amplitude: float = 1.0
    io_penalty: float = 0.15
    sensitivity: tuple[tuple[str, float], ...] = (
        ("service", 1.0),
        ("function", 1.0),
        ("analytics", 0.5),
        ("batch", 0.3),
    )
    restart_penalty_s: float = 10.0  # start-up cost of a replica moved by a fragment merge
    family: PhysicsFamily = PhysicsFamily.KNEE
    membw_amplitude: float = 0.0
    membw_exponent: float = 2.0
    membw: tuple[tuple[str, float], ...] = ()  # per kind: bandwidth demand per CPU
    pairwise: tuple[tuple[str, str, float], ...] = ()  # (victim kind, neighbour kind, effect)


@dataclass(frozen=True, slots=True)
class PowerManagerConfig:
    """The cluster power manager, identical for every scheduler.

    A node idle for ``sleep_after_s`` is suspended if its pool keeps ``reserve_fraction`` of its
    CPU free and awake and at least ``reserve_empty_fraction`` of its nodes awake and empty (whole
    nodes, like cluster-autoscaler overprovisioning, so large requests find room); sleeping nodes
    are woken when work waits or a reserve runs low.
    """

    enabled: bool = True
    sleep_after_s: float = 600.0
    reserve_fraction: float = 0.10
    reserve_empty_fraction: float = 0.03
    tick_s: float = 30.0
    #: Size the CPU reserve from a forecast of the CPU that will arrive before a node woken now
    #: is ready (:mod:`.demand_forecast`) instead of the fixed ``reserve_fraction``; the fixed
    #: reserve shrinks to ``forecast_floor_fraction`` and the empty-node reserve to
    #: ``forecast_empty_fraction``.
    forecast: bool = False
    forecast_bin_s: float = 300.0
    forecast_period_s: float = 86400.0
    #: The reserve is this multiple of the expected CPU arriving within a tick plus a wake.
    forecast_margin: float = 2.0
    # No fixed reserve beyond the forecast's (one awake, empty node per pool stays): chosen on
    # arrival seed 42 (bench/power_forecast.py, docs/prediction.md), where a 2% floor bought nothing.
    forecast_floor_fraction: float = 0.0
    forecast_empty_fraction: float = 0.0


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    description: str
    groups: tuple[NodeGroup, ...]
    classes: tuple[WorkloadClass, ...]
    federation: FederationConfig | None = None
    diurnal_amplitude: float = 0.4
    diurnal_peak_hour: float = 14.0
    bursts_per_day: float = 8.0
    burst_multiplier: float = 3.0
    burst_minutes: float = 10.0
    start_hour: float = 10.0
    warmup_s: float = 1800.0
    drain_s: float = 4 * 3600.0
    contention: ContentionModel = field(default_factory=ContentionModel)
    power_manager: PowerManagerConfig = field(default_factory=PowerManagerConfig)
    solar_hours: tuple[float, float] = (7.0, 19.0)
    congested_link_fraction: float = 0.25

    @property
    def node_count(self) -> int:
        return sum(g.count for g in self.groups)


_SEED_200_CLASSES = (
    WorkloadClass(
        "inference-cpu",
        "service",
        rate_per_hour=2400,
        cpu=(2, 4),
        memory_gb=(4, 8),
        runtime_median_s=20,
        runtime_sigma=0.3,
        priority=100,
        sla_factor=1.5,
        sla_slack_s=2,
        patience_s=120,
        bursty=True,
    ),
    WorkloadClass(
        "inference-mig",
        "service",
        rate_per_hour=1500,
        cpu=(2,),
        memory_gb=(8,),
        runtime_median_s=120,
        runtime_sigma=0.3,
        mig=(("1g.5gb", 0.6), ("2g.10gb", 0.3), ("3g.20gb", 0.1)),
        priority=100,
        sla_factor=1.5,
        sla_slack_s=5,
        patience_s=300,
        bursty=True,
    ),
    WorkloadClass(
        "batch-lammps",
        "batch",
        rate_per_hour=190,
        cpu=(16, 32),
        memory_gb=(32, 64),
        runtime_median_s=1200,
        runtime_sigma=0.6,
        replicas=((1, 0.5), (2, 0.3), (4, 0.2)),
        gang=True,
        priority=0,
        sla_factor=2.0,
        sla_slack_s=600,
    ),
    WorkloadClass(
        "analytics-spark",
        "analytics",
        rate_per_hour=240,
        cpu=(8, 16),
        memory_gb=(64, 128),
        runtime_median_s=600,
        runtime_sigma=0.5,
        replicas=((1, 0.4), (2, 0.3), (4, 0.3)),
        dpu_probability=0.15,
        priority=10,
        sla_factor=2.0,
        sla_slack_s=300,
        data_gb=(10, 100),
    ),
    WorkloadClass(
        "gpu-train",
        "batch",
        rate_per_hour=20,
        cpu=(8,),
        memory_gb=(64,),
        gpu=1,
        runtime_median_s=2400,
        runtime_sigma=0.5,
        priority=50,
        sla_factor=2.0,
        sla_slack_s=600,
    ),
    WorkloadClass(
        "large-gpu-2xa100",
        "batch",
        rate_per_hour=10,
        cpu=(16,),
        memory_gb=(128,),
        gpu=2,
        runtime_median_s=1800,
        runtime_sigma=0.5,
        priority=50,
        sla_factor=2.0,
        sla_slack_s=600,
        patience_s=1800,
        large_gpu=True,
    ),
    WorkloadClass(
        "large-gpu-7g40gb",
        "batch",
        rate_per_hour=20,
        cpu=(16,),
        memory_gb=(128,),
        mig=(("7g.40gb", 1.0),),
        runtime_median_s=1800,
        runtime_sigma=0.5,
        priority=50,
        sla_factor=2.0,
        sla_slack_s=600,
        patience_s=1800,
        large_gpu=True,
    ),
)

SEED_200 = Preset(
    name="seed-200",
    description="150 CPU, 40 GPU (2x A100-40GB), 10 DPU nodes; inference, MPI batch, analytics, GPU jobs",
    groups=(
        NodeGroup("cpu", 150, "cpu", 64, 256),
        NodeGroup("gpu-mig", 20, "gpu", 64, 512, gpus=2, mig_gpus=2),
        NodeGroup("gpu", 20, "gpu", 64, 512, gpus=2),
        NodeGroup("dpu", 10, "dpu", 64, 256, dpus=2),
    ),
    classes=_SEED_200_CLASSES,
)

_MULTI_FEDERATION = {
    "version": 1,
    "default_cluster": "edge-eu",
    "clusters": [
        {"name": "edge-eu", "region": "eu-west", "cost_per_core_hour": 0.035, "carbon_g_per_kwh": 230},
        {"name": "core-us", "region": "us-east", "cost_per_core_hour": 0.030, "carbon_g_per_kwh": 390},
        {"name": "edge-ap", "region": "ap-south", "cost_per_core_hour": 0.028, "carbon_g_per_kwh": 620},
    ],
    "latency_ms": {"eu-west": {"us-east": 80, "ap-south": 140}, "us-east": {"ap-south": 210}},
    "placement": {"divide": "capacity", "spread_min_regions": 1},
}


def _multi_groups() -> tuple[NodeGroup, ...]:
    out = []
    for cluster, region in (("edge-eu", "eu-west"), ("core-us", "us-east"), ("edge-ap", "ap-south")):
        out.append(NodeGroup(f"{cluster}-cpu", 40, "cpu", 64, 256, cluster=cluster, region=region))
        out.append(
            NodeGroup(f"{cluster}-gpu", 6, "gpu", 64, 512, gpus=2, mig_gpus=1, cluster=cluster, region=region)
        )
    return tuple(out)


_REGIONS = ("eu-west", "us-east", "ap-south")

MULTI_CLUSTER = Preset(
    name="multi-cluster",
    description="3 clusters in 3 regions (eu-west, us-east, ap-south) with inter-region latency",
    groups=_multi_groups(),
    classes=(
        replace(_SEED_200_CLASSES[0], rate_per_hour=1500, origin_regions=_REGIONS),
        replace(_SEED_200_CLASSES[1], rate_per_hour=500, origin_regions=_REGIONS),
        replace(_SEED_200_CLASSES[2], rate_per_hour=90, origin_regions=_REGIONS),
        replace(_SEED_200_CLASSES[3], rate_per_hour=120, dpu_probability=0.0, origin_regions=_REGIONS),
        replace(_SEED_200_CLASSES[4], rate_per_hour=12, origin_regions=_REGIONS),
    ),
    federation=parse_federation(_MULTI_FEDERATION, source="<preset:multi-cluster>"),
)

EDGE_BATTERY = Preset(
    name="edge-battery",
    description="30 edge boxes (half on solar + battery) and 4 core nodes; short edge functions",
    groups=(
        NodeGroup("edge", 30, "edge", 8, 16, rack_size=5, battery_fraction=0.5, battery_wh=120, charge_w=40),
        NodeGroup("core", 4, "cpu", 64, 256, rack_size=4),
    ),
    classes=(
        WorkloadClass(
            "edge-function",
            "function",
            rate_per_hour=3000,
            cpu=(0.5, 1, 2),
            memory_gb=(0.5, 1, 2),
            runtime_median_s=8,
            runtime_sigma=0.6,
            priority=100,
            sla_factor=1.5,
            sla_slack_s=2,
            patience_s=60,
            bursty=True,
        ),
        WorkloadClass(
            "edge-analytics",
            "analytics",
            rate_per_hour=120,
            cpu=(2, 4),
            memory_gb=(4, 8),
            runtime_median_s=300,
            runtime_sigma=0.5,
            priority=10,
            sla_factor=2.0,
            sla_slack_s=120,
            data_gb=(0.5, 5),
        ),
        WorkloadClass(
            "sensor-batch",
            "batch",
            rate_per_hour=40,
            cpu=(4, 8),
            memory_gb=(8, 16),
            runtime_median_s=900,
            runtime_sigma=0.5,
            priority=0,
            sla_factor=3.0,
            sla_slack_s=600,
        ),
    ),
    power_manager=PowerManagerConfig(sleep_after_s=300.0),
)

_SMALL_SLICES = (("1g.5gb", 0.5), ("2g.10gb", 0.3), ("3g.20gb", 0.2))

MIG_FRAGMENTATION = Preset(
    name="mig-fragmentation",
    description="40 GPU nodes, 2 A100s each in MIG mode; small-slice churn beside large 7g/4g instances",
    groups=(NodeGroup("gpu-mig", 40, "gpu", 64, 512, gpus=2, mig_gpus=2),),
    classes=(
        # Offered compute slices (mean slices x mean runtime x rate / 3600) of the fleet's 560:
        # inference ~21%, small batch ~33%, 7g ~21%, 4g ~14%, so ~89% in all (set on arrival
        # seed 42 so that the GPU utilisation of every scheduler is 85-95%).
        WorkloadClass(
            "inference-mig",
            "service",
            rate_per_hour=2500,
            cpu=(2,),
            memory_gb=(8,),
            runtime_median_s=90,
            runtime_sigma=0.4,
            mig=_SMALL_SLICES,
            priority=100,
            sla_factor=1.5,
            sla_slack_s=5,
            patience_s=300,
        ),
        # Long-lived small slices: what pins a GPU half-used for a long time (the fragments).
        WorkloadClass(
            "batch-mig-small",
            "batch",
            rate_per_hour=275,
            cpu=(2, 4),
            memory_gb=(16,),
            runtime_median_s=1200,
            runtime_sigma=0.6,
            mig=_SMALL_SLICES,
            # The large requests' priority: they cannot evict these slices, only wait for them
            # or have them moved (a fragment merge); otherwise preemption, not placement,
            # decides whether a large request starts.
            priority=50,
            sla_factor=2.0,
            sla_slack_s=600,
        ),
        WorkloadClass(
            "large-mig-7g40gb",
            "batch",
            rate_per_hour=30,
            cpu=(8,),
            memory_gb=(64,),
            mig=(("7g.40gb", 1.0),),
            runtime_median_s=1800,
            runtime_sigma=0.5,
            priority=50,
            sla_factor=2.0,
            sla_slack_s=900,
            patience_s=900,
            large_gpu=True,
        ),
        WorkloadClass(
            "large-mig-4g20gb",
            "batch",
            rate_per_hour=35,
            cpu=(8,),
            memory_gb=(64,),
            mig=(("4g.20gb", 1.0),),
            runtime_median_s=1800,
            runtime_sigma=0.5,
            priority=50,
            sla_factor=2.0,
            sla_slack_s=900,
            patience_s=900,
            large_gpu=True,
        ),
    ),
    # A flat day and no bursts: the offered load stays where it is set (--load scales it).
    diurnal_amplitude=0.0,
    bursts_per_day=0.0,
    # The long-lived slices take ~1 h to reach their steady-state layout.
    warmup_s=3600.0,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (SEED_200, MULTI_CLUSTER, EDGE_BATTERY, MIG_FRAGMENTATION)}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})") from None


@dataclass(frozen=True, slots=True)
class ScenarioView:
    """What a live scheduler sees of a scenario: the nodes that register and the work that
    arrives. Never its contention model, power manager or any other physics (the trainer,
    ``controlplane.policy``, reads presets only through this; tests/unit/sim/test_hidden_physics.py)."""

    name: str
    groups: tuple[NodeGroup, ...]
    classes: tuple[WorkloadClass, ...]


def scenario_view(name: str) -> ScenarioView:
    """The observable side of preset ``name``."""
    preset = get_preset(name)
    return ScenarioView(preset.name, preset.groups, preset.classes)


def scale_preset(preset: Preset, nodes: int) -> Preset:
    """The same scenario on about ``nodes`` nodes: group sizes and arrival rates scale together."""
    if nodes <= 0:
        raise ValueError("nodes must be positive")
    factor = nodes / preset.node_count
    groups = tuple(replace(g, count=max(1, round(g.count * factor))) for g in preset.groups)
    actual = sum(g.count for g in groups) / preset.node_count
    classes = tuple(replace(c, rate_per_hour=c.rate_per_hour * actual) for c in preset.classes)
    return replace(preset, groups=groups, classes=classes)


def scale_load(preset: Preset, factor: float) -> Preset:
    """The same fleet offered ``factor`` times the work: every class's arrival rate scaled, so
    the mix, the diurnal shape and the burst windows stay as they are (``--load``)."""
    if not factor > 0:
        raise ValueError("load factor must be positive")
    if factor == 1.0:
        return preset
    classes = tuple(replace(c, rate_per_hour=c.rate_per_hour * factor) for c in preset.classes)
    return replace(preset, classes=classes)


def lognormal_mean(median: float, sigma: float) -> float:
    """Mean of a lognormal with this median and shape (used for expected runtimes)."""
    return median * math.exp(sigma * sigma / 2)
