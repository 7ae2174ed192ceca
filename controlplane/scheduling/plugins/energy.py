"""Energy: prefer the placement that adds the least power, weighted up on battery nodes.

Marginal power of a placement = the dynamic watts it adds (per-node-type power model) plus the
node's whole idle draw if the node is empty (giving an empty node work keeps it from sleeping).
Divided by the fleet's largest maximum power (so watts compare across node types), times the
adaptive energy weight (higher on battery, more
as the battery drains; see :mod:`edgeplane_contract.objective`). Normalised min-max: the
cheapest candidate gets 100.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeplane_contract.objective import AdaptiveWeights, RewardConfig, energy_weight

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import CycleState, FloatArray, Handle
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins._scores import min_max_scores
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "Energy", "EnergyArgs", "fleet_max_w", "new", "power_terms"]

NAME = "Energy"


@dataclass(frozen=True, slots=True)
class EnergyArgs:
    """The battery rule (same meaning as the reward's ``adaptive`` block)."""

    adaptive: bool = True
    battery_multiplier: float = 4.0
    low_battery_gain: float = 3.0


def power_terms(handle: Handle, cand: Candidates) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(idle W, max W, dynamic W added) per candidate."""
    nodes = handle.nodes
    rows = cand.rows
    cache = nodes.static_cache
    if "idle_w" not in cache:
        cache["idle_w"] = handle.power.idle_w(nodes.node_type, nodes.gpu_count, nodes.dpu_count)
        cache["max_w"] = handle.power.max_w(nodes.node_type, nodes.gpu_count, nodes.dpu_count)
    dynamic = handle.power.dynamic_w(
        nodes.node_type[rows], cand.cpu / np.maximum(nodes.cpu_cap[rows], 1e-9), cand.gpu_units, cand.dpus
    )
    return cache["idle_w"][rows], cache["max_w"][rows], dynamic


def fleet_max_w(handle: Handle) -> float:
    """The largest maximum draw of any node (watts), cached per node-table version."""
    nodes = handle.nodes
    cached = nodes.static_cache.get("fleet_max_w")
    if cached is None:
        peak = handle.power.max_w(nodes.node_type, nodes.gpu_count, nodes.dpu_count)
        cached = nodes.static_cache["fleet_max_w"] = float(peak.max(initial=1.0))
    return float(cached)


class Energy:
    name = NAME

    def __init__(self, args: EnergyArgs, handle: Handle) -> None:
        self.handle = handle
        self.rule = RewardConfig(
            adaptive=AdaptiveWeights(args.adaptive, args.battery_multiplier, args.low_battery_gain)
        )

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        nodes = self.handle.nodes
        idle, _, dynamic = power_terms(self.handle, cand)
        empty = nodes.replicas[cand.rows] <= 0
        relative = (dynamic + np.where(empty, idle, 0.0)) / fleet_max_w(self.handle)
        weight = energy_weight(
            self.rule, nodes.on_battery[cand.rows].astype(np.float64), nodes.battery_pct[cand.rows]
        )
        result: FloatArray = -relative * weight
        return result

    @property
    def energy_rule(self) -> RewardConfig:
        """The battery rule it weighs energy by (the framework's EnergyRuled capability)."""
        return self.rule

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        return min_max_scores(raw)


def new(args: Mapping[str, Any], handle: Handle) -> Energy:
    return Energy(decode_args(EnergyArgs, args, NAME), handle)
