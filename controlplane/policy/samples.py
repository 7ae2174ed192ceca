"""Training and evaluation samples from the decision environment (``policy.env``): the reward
terms of every bin of a state, computed once, and the weight draws that share the state."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from edgeplane_contract.objective import IO_HEAVY_KINDS, RewardInputs, reward_terms
from edgeplane_contract.policy.actions import (
    DECLINE,
    DECLINE_REWARD,
    N_ACTIONS,
    N_BINS,
    action_mask,
    apply_bin,
    expected_runtime,
    select_actions,
)
from edgeplane_contract.policy.features import N_FEATURES, NodeView, Offer, features
from edgeplane_contract.policy.weights import Weights

from controlplane.policy.env import _UNIT_CONFIG, EVAL_SEED_BASE, EnvConfig, sample_state, sample_weights

__all__ = ["EVAL_SEED_BASE", "Samples", "bin_terms", "generate"]


def bin_terms(node: NodeView, offer: Offer, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """(util, qos, energy, penalty) of every bin, shape (64, 4); zeros where masked."""
    out = np.zeros((N_BINS, 4))
    groups: dict[float, list[int]] = {}
    for b in np.flatnonzero(mask[:N_BINS]):
        groups.setdefault(expected_runtime(offer, int(b)), []).append(int(b))
    if not groups:
        return out
    pct = np.nan if node.battery_percent is None else node.battery_percent
    sensitivity = _UNIT_CONFIG.sensitivity.get(offer.kind, 1.0)
    dyn_core = node.dynamic_w_per_core
    for runtime, bins in groups.items():
        quotas = np.array([apply_bin(offer, b)[:3] for b in bins])
        n = len(bins)

        def full(value: float, n: int = n) -> npt.NDArray[np.float64]:
            return np.full(n, value, dtype=np.float64)

        x = RewardInputs(
            cpu_cap=full(node.cpu_capacity),
            cpu_alloc=full(node.cpu_allocated),
            mem_cap=full(node.memory_capacity),
            mem_alloc=full(node.memory_allocated),
            gpu_count=full(node.gpu_count),
            gpu_used=full(node.gpu_used),
            cpu_add=quotas[:, 0],
            mem_add=quotas[:, 1],
            gpu_add=quotas[:, 2],
            sens_sum=full(node.sensitivity_sum),
            replicas=full(node.replicas),
            io_count=full(node.io_heavy_replicas),
            idle_w=full(node.idle_w),
            max_w=full(node.max_w),
            dynamic_w=dyn_core * quotas[:, 0] + node.gpu_dynamic_w_per_unit * quotas[:, 2],
            power_ref_w=node.power_ref_w,
            on_battery=full(1.0 if node.on_battery else 0.0),
            battery_pct=full(pct),
            transfer_s=full(offer.transfer_s),
            runtime_s=runtime,
            sla_s=offer.sla_s,
            sensitivity=sensitivity,
            io_heavy=offer.kind in IO_HEAVY_KINDS,
        )
        t = reward_terms(x, _UNIT_CONFIG)
        out[bins, 0] = t.util
        out[bins, 1] = t.qos
        out[bins, 2] = t.energy
        out[bins, 3] = t.penalty
    return out


@dataclass(slots=True)
class Samples:
    """Decisions drawn from the environment, with every action's reward terms.

    Row ``i`` is state ``state[i]`` under ``weights[i]``; ``x`` its features, ``mask`` its
    allowed actions (65), ``terms`` the unweighted reward terms of its 64 bins.
    """

    x: npt.NDArray[np.float32]
    mask: npt.NDArray[np.bool_]
    terms: npt.NDArray[np.float32]
    weights: npt.NDArray[np.float64]
    state: npt.NDArray[np.int64]
    cases: list[tuple[NodeView, Offer]] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def rewards(self) -> npt.NDArray[np.float64]:
        """Reward total per row and action (N, 65): -inf where masked, decline's constant."""
        w = self.weights
        t = self.terms.astype(np.float64)
        total = w[:, None, 0] * t[..., 0] + w[:, None, 1] * t[..., 1] + w[:, None, 2] * t[..., 2]
        total = total - w[:, None, 3] * t[..., 3]
        out = np.full((len(self), N_ACTIONS), -np.inf)
        out[:, :N_BINS] = np.where(self.mask[:, :N_BINS], total, -np.inf)
        out[:, DECLINE] = DECLINE_REWARD
        return out

    def best_actions(self) -> npt.NDArray[np.int64]:
        """The teacher: exhaustive reward argmax per row (decline unless a bin beats it)."""
        return select_actions(self.rewards()[:, :N_BINS], self.mask)

    def save(self, path: str) -> None:
        np.savez_compressed(
            path, x=self.x, mask=self.mask, terms=self.terms, weights=self.weights, state=self.state
        )

    @classmethod
    def load(cls, path: str) -> Samples:
        with np.load(path) as data:
            return cls(
                x=data["x"],
                mask=data["mask"],
                terms=data["terms"],
                weights=data["weights"],
                state=data["state"],
            )


def generate(
    seeds: Iterable[int],
    states_per_seed: int,
    *,
    weights_per_state: int = 1,
    cfg: EnvConfig | None = None,
    with_terms: bool = True,
    keep_cases: bool = False,
) -> Samples:
    """Draw ``states_per_seed`` states from each seed's generator, each under several weights."""
    cfg = cfg or EnvConfig()
    xs: list[npt.NDArray[np.float32]] = []
    masks: list[npt.NDArray[np.bool_]] = []
    terms: list[npt.NDArray[np.float64]] = []
    weights: list[Weights] = []
    state_ids: list[int] = []
    cases: list[tuple[NodeView, Offer]] = []
    n_state = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        for _ in range(states_per_seed):
            node, offer = sample_state(rng, cfg)
            mask = action_mask(node, offer)
            t = bin_terms(node, offer, mask) if with_terms else np.zeros((N_BINS, 4))
            if keep_cases:
                cases.append((node, offer))
            for _ in range(weights_per_state):
                w = sample_weights(rng, node, cfg)
                xs.append(features(node, offer, w))
                masks.append(mask)
                terms.append(t)
                weights.append(w)
                state_ids.append(n_state)
            n_state += 1
    return Samples(
        x=np.stack(xs) if xs else np.zeros((0, N_FEATURES), dtype=np.float32),
        mask=np.stack(masks) if masks else np.zeros((0, N_ACTIONS), dtype=np.bool_),
        terms=np.stack(terms).astype(np.float32) if terms else np.zeros((0, N_BINS, 4), dtype=np.float32),
        weights=np.array(weights, dtype=np.float64).reshape(-1, 4),
        state=np.array(state_ids, dtype=np.int64),
        cases=cases,
    )
