"""The fallback scorer: the exact reward of every allowed bin, best one or decline.

Also the teacher the model is distilled from (the trainer evaluates the same reward, vectorised).
It calls :func:`edgeplane_contract.objective.reward` once per allowed bin with fixed (already
adapted) weights, so it costs about a reward evaluation per bin (~0.1-0.3 ms each): fine as a
fallback, too slow to be the normal path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from edgeplane_contract.policy.actions import (
    DECLINE,
    DECLINE_REWARD,
    N_ACTIONS,
    N_BINS,
    apply_bin,
    expected_runtime,
)
from edgeplane_contract.policy.features import KNEE, PRIOR_SENSITIVITY, NodeView, Offer

if TYPE_CHECKING:
    from edgeplane_contract.objective import NodeSnapshot, RewardConfig

__all__ = ["action_rewards", "best_action", "snapshot", "unit_config"]


def snapshot(node: NodeView, offer: Offer) -> NodeSnapshot:
    """The reward module's ``NodeSnapshot`` of this node for this offer."""
    from edgeplane_contract.objective import NodeSnapshot

    return NodeSnapshot(
        cpu_cap=node.cpu_capacity,
        cpu_alloc=node.cpu_allocated,
        mem_cap=node.memory_capacity,
        mem_alloc=node.memory_allocated,
        gpu_count=node.gpu_count,
        gpu_used=node.gpu_used,
        sens_sum=node.sensitivity_sum,
        replicas=node.replicas,
        io_count=node.io_heavy_replicas,
        idle_w=node.idle_w,
        max_w=node.max_w,
        cpu_dynamic_w_per_core=node.dynamic_w_per_core,
        gpu_dynamic_w_per_unit=node.gpu_dynamic_w_per_unit,
        on_battery=node.on_battery,
        battery_pct=node.battery_percent,
        transfer_s=offer.transfer_s,
        power_ref_w=node.power_ref_w,
    )


def unit_config(weights: Sequence[float]) -> RewardConfig:
    """A ``RewardConfig`` with these weights, fixed: w3 is already the adapted one."""
    from edgeplane_contract.objective import AdaptiveWeights, RewardConfig, RewardWeights

    w1, w2, w3, w4 = (float(w) for w in weights)
    return RewardConfig(
        weights=RewardWeights(util=w1, qos=w2, energy=w3, penalty=w4),
        adaptive=AdaptiveWeights(enabled=False),
        knee=KNEE,
        sensitivity=dict(PRIOR_SENSITIVITY),
    )


def action_rewards(
    node: NodeView, offer: Offer, weights: Sequence[float], mask: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Reward total per action (length :data:`N_ACTIONS`): -inf where masked, decline's constant."""
    from edgeplane_contract.objective import reward

    state = snapshot(node, offer)
    cfg = unit_config(weights)
    out = np.full(N_ACTIONS, -np.inf)
    out[DECLINE] = DECLINE_REWARD
    for b in np.flatnonzero(mask[:N_BINS]):
        cpu, memory, gpu_units, _ = apply_bin(offer, int(b))
        out[b] = reward(
            state,
            cpu=cpu,
            memory=memory,
            gpu_units=gpu_units,
            kind=offer.kind,
            runtime_s=expected_runtime(offer, int(b)),
            sla_s=offer.sla_s,
            cfg=cfg,
        ).total
    return out


def best_action(rewards: npt.NDArray[np.float64]) -> int:
    """The best action; decline when no bin beats declining (ties go to the lower bin)."""
    best = int(np.argmax(rewards[:N_BINS]))
    if not rewards[best] > rewards[DECLINE]:
        return DECLINE
    return best
