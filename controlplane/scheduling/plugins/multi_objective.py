"""MultiObjective: score each candidate action by the reward R (``edgeplane_contract/objective.py``).

This is the ``edgeplane`` profile's main score and the same function a learned policy is
trained on. Normalisation is a fixed affine map of R from ``[score_floor, score_ceiling]`` onto
[0, 100] (clipped), not min-max, so a small reward difference stays small next to other plugins.
The reward terms of every candidate are kept in the cycle state for the explanation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgeplane_contract.objective import IO_HEAVY_KINDS, RewardConfig, RewardInputs, reward_terms

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.data_transfer import transfer_seconds
from controlplane.scheduling.explanation import CandidateExtras
from controlplane.scheduling.framework import MAX_NODE_SCORE, STATE_NOW, CycleState, FloatArray, Handle, clip
from controlplane.scheduling.interference import InterferenceEstimate
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins.args import decode_args
from controlplane.scheduling.plugins.energy import fleet_max_w, power_terms
from controlplane.scheduling.sla_risk import SlaRiskTable

__all__ = ["NAME", "STATE_TERMS", "MultiObjective", "MultiObjectiveArgs", "new"]

NAME = "MultiObjective"
STATE_TERMS = "MultiObjective/terms"


@dataclass(frozen=True, slots=True)
class MultiObjectiveArgs:
    """``reward``: the reward block (weights, adaptive rule, knee, ...); the normalisation range."""

    reward: dict[str, Any] = field(default_factory=dict)
    score_floor: float = -3.0
    score_ceiling: float = 1.0


class MultiObjective:
    name = NAME

    def __init__(self, args: MultiObjectiveArgs, handle: Handle) -> None:
        if args.score_ceiling <= args.score_floor:
            raise ValueError(f"{NAME}: score_ceiling must be above score_floor")
        self.handle = handle
        self.config = RewardConfig.from_dict(args.reward)
        self.floor = args.score_floor
        self.ceiling = args.score_ceiling
        self.sla_risk: SlaRiskTable | None = None
        """The learned SLA-miss risk (``reward.sla_risk_weight`` > 0 and outcomes seen), else None."""

    def inputs(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> RewardInputs:
        nodes = self.handle.nodes
        rows = cand.rows
        idle, peak, dynamic = power_terms(self.handle, cand)
        cfg = self.config
        runtime = request.expected_runtime_s
        if runtime is None:
            runtime = cfg.default_runtime_s.get(request.kind, 60.0)
        transfer = transfer_seconds(self.handle, request, rows, state.get(STATE_NOW, 0.0))
        risk = added = None
        sla = request.sla_latency_s
        if self.sla_risk is not None and cfg.sla_risk_weight > 0.0 and sla is not None and sla > 0:
            cap = np.maximum(nodes.cpu_cap[rows], 1e-9)
            before = nodes.cpu_alloc[rows] / cap
            after = before + cand.cpu / cap
            # The runtime ratio the SLA allows on each candidate (its input pull comes first).
            allowed = (sla - transfer) / max(float(runtime), 1e-9)
            risk = self.sla_risk.risk(request.kind, after, allowed)
            if risk is not None:
                # What the placement adds to the replicas already there, read as replicas like
                # this one (their own SLAs are not in the node table).
                was = self.sla_risk.risk(request.kind, before, allowed)
                added = nodes.replicas[rows] * (risk - was) if was is not None else None
        return RewardInputs(
            cpu_cap=nodes.cpu_cap[rows],
            cpu_alloc=nodes.cpu_alloc[rows],
            mem_cap=nodes.mem_cap[rows],
            mem_alloc=nodes.mem_alloc[rows],
            gpu_count=nodes.gpu_count[rows].astype(np.float64),
            gpu_used=nodes.gpu_compute_used(rows),
            cpu_add=cand.cpu,
            mem_add=cand.memory,
            gpu_add=cand.gpu_units,
            sens_sum=nodes.sens_milli[rows] / 1000.0,
            replicas=nodes.replicas[rows].astype(np.float64),
            io_count=nodes.io_count[rows].astype(np.float64),
            idle_w=idle,
            max_w=peak,
            dynamic_w=dynamic,
            power_ref_w=fleet_max_w(self.handle),
            on_battery=nodes.on_battery[rows].astype(np.float64),
            battery_pct=nodes.battery_pct[rows],
            transfer_s=transfer,
            runtime_s=float(runtime),
            sla_s=request.sla_latency_s,
            sensitivity=cfg.sensitivity.get(request.kind, 1.0),
            io_heavy=request.kind in IO_HEAVY_KINDS,
            sla_risk=risk,
            sla_risk_added=added,
        )

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        terms = reward_terms(self.inputs(state, request, cand), self.config)
        state.write(STATE_TERMS, terms)
        return terms.total

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        result: FloatArray = MAX_NODE_SCORE * clip((raw - self.floor) / (self.ceiling - self.floor), 0.0, 1.0)
        return result

    def use_interference(self, estimate: InterferenceEstimate) -> None:
        """Score with a learned interference model (knee, per-kind sensitivity, I/O penalty)."""
        self.config = replace(
            self.config,
            knee=estimate.knee,
            sensitivity={**self.config.sensitivity, **estimate.sensitivity},
            io_penalty=estimate.io_penalty,
        )

    def use_sla_risk(self, table: SlaRiskTable) -> None:
        """Score with the SLA-miss risk learned from outcomes (used when ``sla_risk_weight`` > 0)."""
        self.sla_risk = table

    @property
    def reward_config(self) -> RewardConfig:
        """The reward this plugin scores by (the framework's RewardScorer capability)."""
        return self.config

    @property
    def energy_rule(self) -> RewardConfig:
        """Its battery rule is the reward's ``adaptive`` block (the EnergyRuled capability)."""
        return self.config

    def explain_candidate(self, state: CycleState, k: int) -> CandidateExtras | None:
        """The reward terms of candidate ``k`` from this cycle's score (CandidateExplainer)."""
        terms = state.get(STATE_TERMS)
        if terms is None:
            return None
        return CandidateExtras(reward=terms.at(k))


def new(args: Mapping[str, Any], handle: Handle) -> MultiObjective:
    return MultiObjective(decode_args(MultiObjectiveArgs, args, NAME), handle)
