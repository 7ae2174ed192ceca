"""The profile's objective seen from outside a cycle: the reward R of one placement (what
trainers learn from) and the energy weight ``w3`` per node (what the simulator's power manager
orders nodes by).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.objective import NodeSnapshot, RewardBreakdown, energy_weight, reward

from controlplane.scheduling.data_transfer import transfer_seconds
from controlplane.scheduling.framework import FloatArray, Handle
from controlplane.scheduling.model import Assignment, WorkloadRequest
from controlplane.scheduling.plugin_set import PluginSet

__all__ = ["energy_weights", "placement_reward"]


def energy_weights(handle: Handle, plugins: PluginSet, names: Sequence[str]) -> FloatArray:
    """The energy weight ``w3`` of each named node under the profile's rule, from the node's last
    reported power source and charge (the configured ``w3`` for every node when the profile has no
    adaptive rule). Unknown names get the configured ``w3``."""
    nodes = handle.nodes
    rule = plugins.energy_rule or plugins.reward_config
    base = rule.weights.energy
    rows = np.array([nodes.index.get(n, -1) for n in names], dtype=np.int64)
    known = rows >= 0
    result = np.full(len(rows), base, dtype=np.float64)
    if plugins.energy_rule is not None and known.any():
        r = rows[known]
        result[known] = energy_weight(
            plugins.energy_rule, nodes.on_battery[r].astype(np.float64), nodes.battery_pct[r]
        )
    return result


def placement_reward(
    handle: Handle,
    plugins: PluginSet,
    request: WorkloadRequest,
    node: str,
    assignment: Assignment,
    now: float,
) -> RewardBreakdown:
    """The reward R of placing ``assignment`` of ``request`` on ``node`` at ``now``."""
    t = handle.nodes
    power = handle.power
    row = t.index[node]
    node_type = t.node_type[row : row + 1]
    gpus = t.gpu_count[row : row + 1]
    dpus = t.dpu_count[row : row + 1]
    spec = power.spec(t.states[row].node_type)
    gpu_units = float(len(assignment.gpus)) + sum(MIG_SPECS[s.profile].compute for s in assignment.mig) / 7.0
    snapshot = NodeSnapshot(
        cpu_cap=float(t.cpu_cap[row]),
        cpu_alloc=float(t.cpu_alloc[row]),
        mem_cap=float(t.mem_cap[row]),
        mem_alloc=float(t.mem_alloc[row]),
        gpu_count=int(t.gpu_count[row]),
        gpu_used=float(t.gpu_compute_used()[row]),
        sens_sum=float(t.sens_sum[row]),
        replicas=int(t.replicas[row]),
        io_count=int(t.io_count[row]),
        idle_w=float(power.idle_w(node_type, gpus, dpus)[0]),
        max_w=float(power.max_w(node_type, gpus, dpus)[0]),
        cpu_dynamic_w_per_core=(spec.max_w - spec.idle_w) / max(float(t.cpu_cap[row]), 1e-9),
        gpu_dynamic_w_per_unit=spec.gpu_max_w - spec.gpu_idle_w,
        on_battery=bool(t.on_battery[row]),
        battery_pct=None if np.isnan(t.battery_pct[row]) else float(t.battery_pct[row]),
        transfer_s=float(transfer_seconds(handle, request, np.array([row]), now)[0]),
    )
    return reward(
        snapshot,
        cpu=assignment.cpu,
        memory=assignment.memory,
        gpu_units=gpu_units,
        kind=request.kind,
        runtime_s=request.expected_runtime_s,
        sla_s=request.sla_latency_s,
        cfg=plugins.reward_config,
    )
