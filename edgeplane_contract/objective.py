"""The multi-objective reward, in one place:  R = w1*R_util + w2*R_qos + w3*R_energy - w4*R_penalty.

For placing one replica (the action) on a node (the state):

* ``R_util`` in [0, 1]: the node's *effective* utilisation after the placement, averaged over
  the resources it has (CPU, memory, and GPU compute where it has GPUs), where CPU counts only up
  to the ``knee``: CPU allocated beyond the efficient range is contention, not useful work.
  Rewards filling busy nodes up to where co-located work starts to slow down.
* ``R_qos`` in [-1, 0] (in [-2, 0] with a learned SLA risk, below): minus the predicted SLA harm.
  The replica's predicted latency is ``L = T * (1 + s * c_after) + transfer`` where ``T`` is its
  expected runtime, ``s`` the kind's contention sensitivity, ``c`` the node's CPU contention
  ``max(0, u - knee) / (1 - knee)`` and ``transfer`` the time to fetch its input data; an
  I/O-heavy replica is further slowed by ``io_penalty`` per I/O-heavy replica already on the node.
  Harm to itself is the SLA overrun ``max(0, L / (margin * SLA) - 1)`` (0 without an SLA) plus
  ``slowdown_weight * (L / T - 1)``, its relative slowdown from contention and remote data; harm
  to its neighbours is the slowdown it adds to each of them, ``sum(s_i) * (c_after - c_before)``
  (plus ``io_penalty`` per I/O-heavy neighbour when it is I/O-heavy itself). With
  ``sla_risk_weight`` > 0 and a learned risk (``RewardInputs.sla_risk``: the chance the replica
  misses its SLA at the node's load after the placement, learned from outcomes without a model,
  controlplane/scheduling/sla_risk.py), ``R_qos`` loses ``min(1, sla_risk_weight * (risk +
  added))``, where ``added`` is the risk the placement adds to the replicas already on the node;
  this part has its own cap of 1. The rest of the sum is capped at 1.
* ``R_energy`` in [-1, 0]: minus the marginal power of the placement over a fleet reference power
  (the largest node's maximum draw, so watts compare across node types): the dynamic watts it
  adds, plus the node's whole idle draw when the node is empty (an empty node could be put to
  sleep; giving it work keeps it awake).
* ``R_penalty`` >= 0: constraint violations: over-commit of any resource (as a fraction of
  capacity; masked actions only) plus 1 when a battery node is below the safety floor.

Adaptive weights: on a battery-powered node ``w3`` becomes
``w3 * battery_multiplier * (1 + low_battery_gain * (1 - battery_percent / 100))``, so energy
weighs more on battery and more still as the battery drains. The rule is configuration.

:func:`reward_terms` is vectorised over candidate nodes and is what the ``MultiObjective`` score
plugin uses; :func:`reward` evaluates one (state, action) pair for an RL trainer with the same
code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgeplane_contract.arrays import FloatArray, clip

__all__ = [
    "INTERFERENCE_MODES",
    "IO_HEAVY_KINDS",
    "KIND_SENSITIVITY",
    "AdaptiveWeights",
    "NodeSnapshot",
    "RewardBreakdown",
    "RewardConfig",
    "RewardInputs",
    "RewardTerms",
    "RewardWeights",
    "energy_weight",
    "reward",
    "reward_terms",
]

# How much a replica of each kind suffers from CPU contention on its node (0: not at all,
# 1: its runtime stretches one-for-one with the contention). A flat, deliberately uninformed
# prior: the true figures depend on hardware and neighbours, and a profile with
# ``interference: learned`` replaces them (and the knee, and io_penalty) with what
# controlplane/scheduling/interference.py fits from observed runtimes.
KIND_SENSITIVITY: dict[str, float] = {"service": 0.6, "function": 0.6, "analytics": 0.6, "batch": 0.6}
INTERFERENCE_MODES = ("fixed", "learned")
IO_HEAVY_KINDS = frozenset({"analytics"})


@dataclass(frozen=True, slots=True)
class RewardWeights:
    """w1..w4 of the reward."""

    util: float = 1.0
    qos: float = 2.0
    energy: float = 1.0
    penalty: float = 4.0


@dataclass(frozen=True, slots=True)
class AdaptiveWeights:
    """How ``w3`` adapts on battery-powered nodes (disable for fixed weights)."""

    enabled: bool = True
    battery_multiplier: float = 4.0
    low_battery_gain: float = 3.0


@dataclass(frozen=True, slots=True)
class RewardConfig:
    """Everything the reward needs besides state and action; the ``reward:`` block of a profile."""

    weights: RewardWeights = field(default_factory=RewardWeights)
    adaptive: AdaptiveWeights = field(default_factory=AdaptiveWeights)
    # CPU utilisation above which co-located work starts to slow down (end of the efficient range):
    # a prior, learned online with ``interference: learned``.
    knee: float = 0.80
    # Predicted latency must stay under margin * SLA before the QoS term is satisfied.
    sla_margin: float = 0.85
    slowdown_weight: float = 0.5
    # Extra slowdown an I/O-heavy replica suffers per other I/O-heavy replica on its node.
    io_penalty: float = 0.1
    battery_floor_percent: float = 15.0
    sensitivity: Mapping[str, float] = field(default_factory=lambda: dict(KIND_SENSITIVITY))
    # Used when a request does not say how long it runs.
    default_runtime_s: Mapping[str, float] = field(
        default_factory=lambda: {"service": 60.0, "function": 5.0, "batch": 1800.0, "analytics": 900.0}
    )
    # "fixed": knee, sensitivity and io_penalty as configured; "learned": those are the prior of
    # the scheduler's online interference estimator, which replaces them as observations arrive.
    interference: str = "fixed"
    # Weight of the learned SLA-miss risk in the QoS harm (0: not used; see RewardInputs.sla_risk).
    sla_risk_weight: float = 0.0

    @classmethod
    def from_dict(cls, body: Mapping[str, Any] | None) -> RewardConfig:
        """Build from a profile's ``reward:`` mapping; unknown keys raise ValueError."""
        if not body:
            return cls()
        allowed = {
            "weights",
            "adaptive",
            "knee",
            "sla_margin",
            "slowdown_weight",
            "io_penalty",
            "battery_floor_percent",
            "sensitivity",
            "default_runtime_s",
            "interference",
            "sla_risk_weight",
        }
        unknown = set(body) - allowed
        if unknown:
            raise ValueError(
                f"unknown reward key {sorted(unknown)[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        cfg = cls()
        weights = dict(body.get("weights") or {})
        aliases = {"w1": "util", "w2": "qos", "w3": "energy", "w4": "penalty"}
        weights = {aliases.get(k, k): float(v) for k, v in weights.items()}
        if set(weights) - {"util", "qos", "energy", "penalty"}:
            raise ValueError(
                f"unknown reward weight {sorted(set(weights) - {'util', 'qos', 'energy', 'penalty'})[0]!r}"
            )
        if any(v < 0 for v in weights.values()):
            raise ValueError("reward weights must be >= 0")
        cfg = replace(cfg, weights=replace(cfg.weights, **weights))
        adaptive = dict(body.get("adaptive") or {})
        if set(adaptive) - {"enabled", "battery_multiplier", "low_battery_gain"}:
            raise ValueError("adaptive takes enabled, battery_multiplier, low_battery_gain")
        cfg = replace(cfg, adaptive=replace(cfg.adaptive, **adaptive))
        scalars: dict[str, Any] = {
            key: float(body[key])
            for key in (
                "knee",
                "sla_margin",
                "slowdown_weight",
                "io_penalty",
                "battery_floor_percent",
                "sla_risk_weight",
            )
            if key in body
        }
        cfg = replace(cfg, **scalars)
        if not 0.0 < cfg.knee < 1.0:
            raise ValueError("knee must be between 0 and 1")
        if not (math.isfinite(cfg.sla_risk_weight) and cfg.sla_risk_weight >= 0.0):
            raise ValueError("sla_risk_weight must be a finite number >= 0")
        if "sensitivity" in body:
            cfg = replace(cfg, sensitivity={**cfg.sensitivity, **body["sensitivity"]})
        if "interference" in body:
            if body["interference"] not in INTERFERENCE_MODES:
                raise ValueError(f"interference must be one of {', '.join(INTERFERENCE_MODES)}")
            cfg = replace(cfg, interference=str(body["interference"]))
        if "default_runtime_s" in body:
            cfg = replace(cfg, default_runtime_s={**cfg.default_runtime_s, **body["default_runtime_s"]})
        return cfg


@dataclass(slots=True)
class RewardInputs:
    """State-and-action arrays for a batch of candidate nodes (scalars broadcast)."""

    cpu_cap: FloatArray
    cpu_alloc: FloatArray
    mem_cap: FloatArray
    mem_alloc: FloatArray
    gpu_count: FloatArray
    gpu_used: FloatArray
    cpu_add: FloatArray
    mem_add: FloatArray
    gpu_add: FloatArray
    sens_sum: FloatArray
    replicas: FloatArray
    io_count: FloatArray
    idle_w: FloatArray
    max_w: FloatArray
    dynamic_w: FloatArray
    power_ref_w: float
    on_battery: FloatArray
    battery_pct: FloatArray
    transfer_s: FloatArray
    runtime_s: float
    sla_s: float | None
    sensitivity: float
    io_heavy: bool = False
    # Learned SLA-miss risk per candidate (None: not learned): the replica's own at the node's
    # load after the placement, and the sum over the replicas already there of what it adds.
    sla_risk: FloatArray | None = None
    sla_risk_added: FloatArray | None = None


@dataclass(slots=True)
class RewardTerms:
    """Per-candidate components and total (arrays aligned with the inputs)."""

    util: FloatArray
    qos: FloatArray
    energy: FloatArray
    penalty: FloatArray
    w_energy: FloatArray
    predicted_latency_s: FloatArray
    total: FloatArray
    # What the learned SLA-miss risk takes off ``total`` (``w2`` times its part of ``-qos``; 0
    # where none is weighted): what a bid from a model that does not know the risk is corrected
    # by (LocalPolicyBid, the hub's bid round).
    sla_risk_cost: FloatArray | float = 0.0

    def at(self, k: int) -> RewardBreakdown:
        """Candidate ``k``'s reward and its parts."""
        return RewardBreakdown(
            total=float(self.total[k]),
            util=float(self.util[k]),
            qos=float(self.qos[k]),
            energy=float(self.energy[k]),
            penalty=float(self.penalty[k]),
            w_energy=float(self.w_energy[k]),
            predicted_latency_s=float(self.predicted_latency_s[k]),
            sla_risk_cost=float(np.broadcast_to(self.sla_risk_cost, np.shape(self.total))[k]),
        )


def energy_weight(cfg: RewardConfig, on_battery: FloatArray, battery_pct: FloatArray) -> FloatArray:
    """The adaptive w3 per node."""
    base = np.full(np.shape(on_battery), cfg.weights.energy, dtype=np.float64)
    if not cfg.adaptive.enabled or not np.any(on_battery):
        return base
    level = clip(np.where(np.isnan(battery_pct), 100.0, battery_pct) / 100.0, 0.0, 1.0)
    boosted = base * cfg.adaptive.battery_multiplier * (1.0 + cfg.adaptive.low_battery_gain * (1.0 - level))
    result: FloatArray = np.where(on_battery > 0, boosted, base)
    return result


def _contention(u: FloatArray, knee: float) -> FloatArray:
    result: FloatArray = clip((u - knee) / (1.0 - knee), 0.0, 1.0)
    return result


def reward_terms(x: RewardInputs, cfg: RewardConfig) -> RewardTerms:
    """Vectorised reward of placing one replica on each candidate node."""
    cpu_cap = np.maximum(x.cpu_cap, 1e-9)
    mem_cap = np.maximum(x.mem_cap, 1.0)
    u_cpu_before = x.cpu_alloc / cpu_cap
    u_cpu_after = (x.cpu_alloc + x.cpu_add) / cpu_cap
    u_mem_after = (x.mem_alloc + x.mem_add) / mem_cap
    util = np.minimum(u_cpu_after, cfg.knee) / cfg.knee + np.minimum(u_mem_after, 1.0)
    over = np.maximum(0.0, u_cpu_after - 1.0) + np.maximum(0.0, u_mem_after - 1.0)
    has_gpu = x.gpu_count > 0
    if has_gpu.any():
        u_gpu_after = (x.gpu_used + x.gpu_add) / np.maximum(x.gpu_count, 1.0)
        util = (util + np.where(has_gpu, np.minimum(u_gpu_after, 1.0), 0.0)) / np.where(has_gpu, 3.0, 2.0)
        over = over + np.where(has_gpu, np.maximum(0.0, u_gpu_after - 1.0), 0.0)
    else:
        util = util / 2.0

    c_before = _contention(u_cpu_before, cfg.knee)
    c_after = _contention(u_cpu_after, cfg.knee)
    io_slow = 1.0 + cfg.io_penalty * x.io_count if x.io_heavy else 1.0
    latency = x.runtime_s * (1.0 + x.sensitivity * c_after) * io_slow + x.transfer_s
    own = cfg.slowdown_weight * (latency / max(x.runtime_s, 1e-9) - 1.0)
    if x.sla_s is not None and x.sla_s > 0:
        own = own + np.maximum(0.0, latency / (cfg.sla_margin * x.sla_s) - 1.0)
    neighbours = x.sens_sum * (c_after - c_before)
    if x.io_heavy:
        neighbours = neighbours + cfg.io_penalty * x.io_count
    qos = -np.minimum(1.0, own + neighbours)
    risk_cost: FloatArray | float = 0.0
    if cfg.sla_risk_weight > 0.0 and x.sla_risk is not None:
        # Its own cap: folded into the one above, a large weight would saturate every
        # candidate at -1 and so stop telling them apart.
        risk = x.sla_risk if x.sla_risk_added is None else x.sla_risk + x.sla_risk_added
        risk_cost = np.minimum(1.0, cfg.sla_risk_weight * risk)
        qos = qos - risk_cost

    wakes = (x.replicas <= 0).astype(np.float64)
    delta_w = x.dynamic_w + wakes * x.idle_w
    energy = -clip(delta_w / max(x.power_ref_w, 1.0), 0.0, 1.0)

    penalty = over
    if np.any(x.on_battery):
        level = np.where(np.isnan(x.battery_pct), 100.0, x.battery_pct)
        penalty = penalty + ((x.on_battery > 0) & (level < cfg.battery_floor_percent)).astype(np.float64)

    w3 = energy_weight(cfg, x.on_battery, x.battery_pct)
    w = cfg.weights
    total = w.util * util + w.qos * qos + w3 * energy - w.penalty * penalty
    return RewardTerms(
        util=util,
        qos=qos,
        energy=energy,
        penalty=penalty,
        w_energy=w3,
        predicted_latency_s=latency,
        total=total,
        sla_risk_cost=w.qos * risk_cost,
    )


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One node's state as the reward sees it (what an RL trainer logs per step)."""

    cpu_cap: float
    cpu_alloc: float
    mem_cap: float
    mem_alloc: float
    gpu_count: int = 0
    gpu_used: float = 0.0
    sens_sum: float = 0.0
    replicas: int = 0
    io_count: int = 0
    idle_w: float = 160.0
    max_w: float = 420.0
    cpu_dynamic_w_per_core: float = 0.0
    gpu_dynamic_w_per_unit: float = 0.0
    on_battery: bool = False
    battery_pct: float | None = None
    transfer_s: float = 0.0
    # Watts that count as R_energy = -1 (the fleet's largest maximum draw); defaults to max_w.
    power_ref_w: float | None = None


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """The reward of one (state, action) and its parts (JSON-able through ``to_dict``)."""

    total: float
    util: float
    qos: float
    energy: float
    penalty: float
    w_energy: float
    predicted_latency_s: float
    # What the learned SLA-miss risk took off ``total`` (see RewardTerms.sla_risk_cost).
    sla_risk_cost: float = 0.0

    def to_dict(self) -> dict[str, float]:
        out = {
            "total": self.total,
            "R_util": self.util,
            "R_qos": self.qos,
            "R_energy": self.energy,
            "R_penalty": self.penalty,
            "w3_effective": self.w_energy,
            "predicted_latency_s": self.predicted_latency_s,
        }
        if self.sla_risk_cost:
            out["sla_risk_cost"] = self.sla_risk_cost
        return out


def reward(
    state: NodeSnapshot,
    *,
    cpu: float,
    memory: float,
    gpu_units: float,
    kind: str,
    runtime_s: float | None,
    sla_s: float | None,
    cfg: RewardConfig,
) -> RewardBreakdown:
    """Reward of placing one replica (the action's quotas) on the node described by ``state``."""

    def arr(value: float) -> FloatArray:
        return np.array([value], dtype=np.float64)

    runtime = runtime_s if runtime_s is not None else cfg.default_runtime_s.get(kind, 60.0)
    x = RewardInputs(
        cpu_cap=arr(state.cpu_cap),
        cpu_alloc=arr(state.cpu_alloc),
        mem_cap=arr(state.mem_cap),
        mem_alloc=arr(state.mem_alloc),
        gpu_count=arr(state.gpu_count),
        gpu_used=arr(state.gpu_used),
        cpu_add=arr(cpu),
        mem_add=arr(memory),
        gpu_add=arr(gpu_units),
        sens_sum=arr(state.sens_sum),
        replicas=arr(state.replicas),
        io_count=arr(state.io_count),
        idle_w=arr(state.idle_w),
        max_w=arr(state.max_w),
        dynamic_w=arr(state.cpu_dynamic_w_per_core * cpu + state.gpu_dynamic_w_per_unit * gpu_units),
        power_ref_w=state.power_ref_w if state.power_ref_w is not None else state.max_w,
        on_battery=arr(1.0 if state.on_battery else 0.0),
        battery_pct=arr(np.nan if state.battery_pct is None else state.battery_pct),
        transfer_s=arr(state.transfer_s),
        runtime_s=runtime,
        sla_s=sla_s,
        sensitivity=cfg.sensitivity.get(kind, 1.0),
        io_heavy=kind in IO_HEAVY_KINDS,
    )
    return reward_terms(x, cfg).at(0)
