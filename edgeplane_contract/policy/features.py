"""The local policy's feature schema: (node, offer, weights) -> a fixed-length float32 vector.

Bump :data:`FEATURE_SCHEMA_VERSION` whenever :data:`FEATURE_NAMES`, any scaling below, or the
interference prior the features are computed with (:data:`KNEE`, :data:`PRIOR_SENSITIVITY`)
changes: the runtime refuses a model whose ``metadata.json`` names another version, or another
prior (its ``interference_prior``).

Every feature is scaled to roughly [0, 1] (a few reach 2-4) because the int8 model quantises its
input with one scale for the whole vector; a feature in bytes or watts would swamp the others.
Besides the raw state the vector carries a few derived quantities (contention before/after the
request, free room per requested unit, the weighted energy cost of the request) that the reward
depends on non-linearly: a small MLP gets them right far more cheaply than it learns them.

Pure Python arithmetic into one ``np.array`` call: this runs once per offered piece of work and
is part of the < 50 us decision budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from edgeplane_contract.objective import KIND_SENSITIVITY, RewardConfig

__all__ = [
    "BATTERY_FLOOR_PERCENT",
    "DEFAULT_POWER_REF_W",
    "DEFAULT_RUNTIME_S",
    "FEATURE_NAMES",
    "FEATURE_SCHEMA_VERSION",
    "KINDS",
    "KNEE",
    "MIG_PROFILE_ORDER",
    "NODE_TYPES",
    "N_FEATURES",
    "PRIOR_SENSITIVITY",
    "NodeView",
    "Offer",
    "features",
    "interference_prior",
    "mig_free_from_occupancy",
    "write_features",
]

# 2: contention and neighbour sensitivity computed with the reward's prior (knee 0.80, flat 0.6)
# instead of the simulator's reference physics (knee 0.70, 1.0/1.0/0.5/0.3), issue 13.
FEATURE_SCHEMA_VERSION = 2

NODE_TYPES = ("cpu", "gpu", "dpu", "edge")
KINDS = ("service", "function", "batch", "analytics")
# MIG profiles in the order of NodeView.mig_free (smallest first).
MIG_PROFILE_ORDER = ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")

# Mirrors of reward-config defaults (tests pin them to edgeplane_contract.objective.RewardConfig()).
DEFAULT_RUNTIME_S = {"service": 60.0, "function": 5.0, "batch": 1800.0, "analytics": 900.0}
# The interference model the contention features, the heuristic and the trainer's environment
# use: the reward's uninformed prior, taken from edgeplane_contract.objective (one place), never the
# simulator's physics (issue 13: no scheduler may know it). The shipped model was trained with
# these values and metadata.json records them (``interference_prior``); the runtime refuses a
# model trained with other ones, so changing the prior in objective.py means retraining.
KNEE: float = RewardConfig().knee
PRIOR_SENSITIVITY: Mapping[str, float] = MappingProxyType(dict(KIND_SENSITIVITY))
BATTERY_FLOOR_PERCENT = 15.0
# Fleet reference power (W) when the agent is not told its fleet's: a 64-vCPU server's peak,
# the largest node of the edge-battery fleet. R_energy is watts over this.
DEFAULT_POWER_REF_W = 420.0

_GB = 1e9


def interference_prior() -> dict[str, object]:
    """The prior the features are computed with, as ``metadata.json`` records it."""
    return {"knee": KNEE, "sensitivity": {k: PRIOR_SENSITIVITY[k] for k in sorted(PRIOR_SENSITIVITY)}}


@dataclass(slots=True)
class NodeView:
    """What the agent knows about its own node when work is offered.

    Memory is in bytes, CPU in cores, power in watts. ``gpus_free`` counts whole GPUs (not in
    MIG mode) with nothing on them; ``mig_free`` counts, per profile of
    :data:`MIG_PROFILE_ORDER`, how many instances of that profile alone could still be created on
    the node's MIG-mode GPUs (see :func:`mig_free_from_occupancy`). ``gpu_used`` is the GPU
    compute in use in GPU units (a MIG slice counts compute/7). ``sensitivity_sum`` and
    ``io_heavy_replicas`` describe the replicas already running (the reward's neighbour harm).
    ``cpu_dynamic_w_per_core`` defaults to ``(max_w - idle_w) / cpu_capacity`` (right for nodes
    without accelerators); ``power_ref_w`` is the fleet's largest peak draw.
    """

    node_type: str
    cpu_capacity: float
    cpu_allocated: float
    memory_capacity: float
    memory_allocated: float
    gpu_count: int = 0
    gpus_free: int = 0
    gpu_used: float = 0.0
    mig_free: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    replicas: int = 0
    sensitivity_sum: float = 0.0
    io_heavy_replicas: int = 0
    on_battery: bool = False
    battery_percent: float | None = None
    idle_w: float = 160.0
    max_w: float = 420.0
    cpu_dynamic_w_per_core: float | None = None
    gpu_dynamic_w_per_unit: float = 0.0
    power_ref_w: float = DEFAULT_POWER_REF_W

    @property
    def cpu_free(self) -> float:
        return self.cpu_capacity - self.cpu_allocated

    @property
    def memory_free(self) -> float:
        return self.memory_capacity - self.memory_allocated

    @property
    def dynamic_w_per_core(self) -> float:
        """Watts one more busy core adds."""
        if self.cpu_dynamic_w_per_core is not None:
            return self.cpu_dynamic_w_per_core
        return max(self.max_w - self.idle_w, 0.0) / max(self.cpu_capacity, 1e-9)


@dataclass(slots=True)
class Offer:
    """One replica the hub offers to the node: its request, kind, SLA and runtime estimate.

    ``gpu`` asks for whole GPUs, ``mig`` for one MIG instance of that profile (not both).
    ``runtime_s`` is the expected runtime at the requested resources (None: the kind's default);
    ``sla_s`` the completion-time SLA (None: none); ``transfer_s`` the time to fetch its input
    data to this node.
    """

    kind: str = "service"
    cpu: float = 1.0
    memory: float = _GB
    gpu: int = 0
    mig: str | None = None
    sla_s: float | None = None
    runtime_s: float | None = None
    priority: int = 0
    transfer_s: float = 0.0

    @property
    def expected_runtime_s(self) -> float:
        if self.runtime_s is not None:
            return self.runtime_s
        return DEFAULT_RUNTIME_S.get(self.kind, 60.0)

    @classmethod
    def from_request(
        cls,
        *,
        kind: str,
        cpu: float,
        memory: float,
        gpu: int,
        mig: Sequence[str],
        sla_s: float | None,
        runtime_s: float | None,
        priority: int,
    ) -> Offer:
        """The offer of a replica request (the hub's bid offer, or the scheduler's request): an
        unknown kind counts as ``batch``; a MIG request asks for its first profile, no whole GPUs."""
        return cls(
            kind=kind if kind in KINDS else "batch",
            cpu=float(cpu),
            memory=float(memory),
            gpu=gpu if not mig else 0,
            mig=mig[0] if mig else None,
            sla_s=sla_s,
            runtime_s=runtime_s,
            priority=priority,
        )


FEATURE_NAMES: tuple[str, ...] = (
    # node
    "node.cpu_capacity_log",
    "node.memory_capacity_log",
    "node.cpu_allocated_frac",
    "node.memory_allocated_frac",
    "node.cpu_free_frac",
    "node.memory_free_frac",
    "node.gpu_count",
    "node.gpus_free",
    "node.gpu_used_frac",
    "node.mig_free.1g.5gb",
    "node.mig_free.2g.10gb",
    "node.mig_free.3g.20gb",
    "node.mig_free.4g.20gb",
    "node.mig_free.7g.40gb",
    "node.type.cpu",
    "node.type.gpu",
    "node.type.dpu",
    "node.type.edge",
    "node.on_battery",
    "node.battery_level",
    "node.battery_below_floor",
    "node.idle_w_rel",
    "node.max_w_rel",
    "node.empty",
    "node.replicas_log",
    "node.sensitivity_sum",
    "node.io_heavy_replicas",
    "node.contention",
    # offer
    "offer.cpu_rel",
    "offer.memory_rel",
    "offer.cpu_log",
    "offer.memory_log",
    "offer.gpu",
    "offer.mig_compute",
    "offer.gpu_memory",
    "offer.kind.service",
    "offer.kind.function",
    "offer.kind.batch",
    "offer.kind.analytics",
    "offer.has_sla",
    "offer.sla_over_runtime",
    "offer.runtime_log",
    "offer.priority",
    "offer.transfer_over_runtime",
    # offer on this node
    "fit.cpu_room",
    "fit.memory_room",
    "fit.contention_after",
    "fit.cpu_util_after",
    "fit.energy_rel",
    # weights
    "w.util",
    "w.qos",
    "w.energy",
    "w.penalty",
    "w.energy_log",
    "w.energy_cost",
)
N_FEATURES = len(FEATURE_NAMES)

_MIG_COMPUTE = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}
_MIG_MEMORY_GB = {"1g.5gb": 5, "2g.10gb": 10, "3g.20gb": 20, "4g.20gb": 20, "7g.40gb": 40}
_LOG2 = math.log2


def _clip(value: float, high: float) -> float:
    return 0.0 if value < 0.0 else (high if value > high else value)


def features(node: NodeView, offer: Offer, weights: Sequence[float]) -> npt.NDArray[np.float32]:
    """The feature vector (length :data:`N_FEATURES`, float32) for one decision.

    ``weights`` are the effective w1..w4 (w3 already adapted to the battery, see
    :func:`edgeplane_contract.policy.weights.effective_weights`).
    """
    return np.array(_values(node, offer, weights), dtype=np.float32)


def write_features(
    node: NodeView, offer: Offer, weights: Sequence[float], out: npt.NDArray[np.float32]
) -> None:
    """:func:`features` written into ``out`` (a float32 row of length :data:`N_FEATURES`)."""
    out[:] = _values(node, offer, weights)


def _values(node: NodeView, offer: Offer, weights: Sequence[float]) -> tuple[float, ...]:
    cap = node.cpu_capacity if node.cpu_capacity > 0 else 1e-9
    mcap = node.memory_capacity if node.memory_capacity > 0 else 1.0
    u_cpu = node.cpu_allocated / cap
    u_mem = node.memory_allocated / mcap
    free_cpu = cap - node.cpu_allocated
    free_mem = mcap - node.memory_allocated
    gpus = node.gpu_count
    ref = node.power_ref_w if node.power_ref_w > 0 else 1.0
    ntype = node.node_type
    level = 1.0 if node.battery_percent is None else _clip(node.battery_percent / 100.0, 1.0)
    below = 1.0 if node.on_battery and level * 100.0 < BATTERY_FLOOR_PERCENT else 0.0
    c_before = _clip((u_cpu - KNEE) / (1.0 - KNEE), 1.0)
    u_after = (node.cpu_allocated + offer.cpu) / cap
    c_after = _clip((u_after - KNEE) / (1.0 - KNEE), 1.0)

    mig = offer.mig
    mig_compute = _MIG_COMPUTE.get(mig, 0) if mig else 0
    gpu_units = offer.gpu + mig_compute / 7.0
    gpu_mem = offer.gpu * 40.0 + (_MIG_MEMORY_GB.get(mig, 0) if mig else 0)
    kind = offer.kind
    runtime = offer.expected_runtime_s
    runtime = runtime if runtime > 1e-6 else 1e-6
    sla = offer.sla_s
    has_sla = sla is not None and sla > 0
    empty = node.replicas <= 0
    dyn = node.dynamic_w_per_core * offer.cpu + node.gpu_dynamic_w_per_unit * gpu_units
    energy_rel = _clip((dyn + (node.idle_w if empty else 0.0)) / ref, 1.0)
    w1, w2, w3, w4 = weights
    mf = node.mig_free

    values = (
        _LOG2(1.0 + cap) / 7.0,
        _LOG2(1.0 + mcap / _GB) / 10.0,
        _clip(u_cpu, 2.0),
        _clip(u_mem, 2.0),
        _clip(free_cpu / cap, 1.0),
        _clip(free_mem / mcap, 1.0),
        gpus / 4.0,
        node.gpus_free / 4.0,
        _clip(node.gpu_used / gpus, 1.0) if gpus > 0 else 0.0,
        mf[0] / 7.0,
        mf[1] / 7.0,
        mf[2] / 7.0,
        mf[3] / 7.0,
        mf[4] / 7.0,
        1.0 if ntype == "cpu" else 0.0,
        1.0 if ntype == "gpu" else 0.0,
        1.0 if ntype == "dpu" else 0.0,
        1.0 if ntype == "edge" else 0.0,
        1.0 if node.on_battery else 0.0,
        level,
        below,
        _clip(node.idle_w / ref, 2.0),
        _clip(node.max_w / ref, 2.0),
        1.0 if empty else 0.0,
        math.log1p(max(node.replicas, 0)) / 4.0,
        _clip(node.sensitivity_sum / 8.0, 4.0),
        _clip(node.io_heavy_replicas / 8.0, 4.0),
        c_before,
        _clip(offer.cpu / cap, 2.0),
        _clip(offer.memory / mcap, 2.0),
        _LOG2(1.0 + offer.cpu) / 6.0,
        _LOG2(1.0 + offer.memory / _GB) / 8.0,
        offer.gpu / 4.0,
        mig_compute / 7.0,
        gpu_mem / 80.0,
        1.0 if kind == "service" else 0.0,
        1.0 if kind == "function" else 0.0,
        1.0 if kind == "batch" else 0.0,
        1.0 if kind == "analytics" else 0.0,
        1.0 if has_sla else 0.0,
        _clip(sla / runtime, 8.0) / 8.0 if has_sla and sla is not None else 0.0,
        math.log1p(runtime) / 10.0,
        _clip(offer.priority / 100.0, 2.0),
        _clip(offer.transfer_s / runtime, 4.0) / 4.0,
        _clip(free_cpu / offer.cpu, 4.0) / 4.0 if offer.cpu > 0 else 1.0,
        _clip(free_mem / offer.memory, 4.0) / 4.0 if offer.memory > 0 else 1.0,
        c_after,
        _clip(u_after, 2.0) / 2.0,
        energy_rel,
        w1 / 2.0,
        w2 / 4.0,
        w3 / 4.0,
        w4 / 8.0,
        math.log1p(max(w3, 0.0)) / 3.0,
        _clip(w3 * energy_rel, 4.0),
    )
    return values


def mig_free_from_occupancy(gpus: Iterable[tuple[int, int]]) -> tuple[int, int, int, int, int]:
    """``NodeView.mig_free`` from each MIG-mode GPU's (memory-slice bitmap, compute slices used).

    For every profile: how many instances of it alone could still be created, summed over GPUs
    (legal start positions that are free, limited by the free compute slices).
    """
    from edgeplane_contract.mig import COMPUTE_SLICES, MIG_SPECS

    counts = [0, 0, 0, 0, 0]
    for occ, compute_used in gpus:
        free_compute = COMPUTE_SLICES - compute_used
        for i, name in enumerate(MIG_PROFILE_ORDER):
            spec = MIG_SPECS[name]
            free_starts = sum(1 for s in spec.starts if not occ & spec.mask(s))
            counts[i] += min(free_starts, free_compute // spec.compute)
    return (counts[0], counts[1], counts[2], counts[3], counts[4])
