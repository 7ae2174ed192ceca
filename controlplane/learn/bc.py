"""Behaviour cloning: start PPO's policy at the heuristic it has to improve on.

:func:`collect` steps curriculum episodes with the heuristic's own pick and keeps each decision's
observation, mask, action and discounted return (torch-free). :func:`clone` fits a MaskablePPO
policy to them: cross-entropy of the teacher's action under the masked logits (the actor) and
the squared error of the value head against the heuristic's returns (the critic, so that PPO's
first advantages are not noise). :func:`agreement` is the share of decisions where the
policy's most likely action is the teacher's (exactly, and up to ties in the profile's score).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.learn.curriculum import Curriculum, CurriculumEnv
from controlplane.learn.observe import NODE_COLUMNS

__all__ = ["Demonstrations", "agreement", "clone", "collect"]


@dataclass(slots=True)
class Demonstrations:
    """The heuristic's decisions: ``obs`` (N, D), ``masks`` (N, A), ``actions`` (N,), ``returns`` (N,)."""

    obs: npt.NDArray[np.float32]
    masks: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.int64]
    returns: npt.NDArray[np.float32]
    episode_returns: list[float]

    def __len__(self) -> int:
        return len(self.actions)


def collect(
    curriculum: Curriculum,
    *,
    decisions: int,
    seed: int,
    max_nodes: int = 16,
    gamma: float = 0.99,
) -> Demonstrations:
    """Whole heuristic episodes of ``curriculum`` until at least ``decisions`` decisions."""
    env = CurriculumEnv(curriculum, max_nodes=max_nodes)
    obs_l: list[npt.NDArray[np.float32]] = []
    mask_l: list[npt.NDArray[np.bool_]] = []
    act_l: list[int] = []
    ret_l: list[npt.NDArray[np.float32]] = []
    totals: list[float] = []
    obs, info = env.reset(seed=seed)
    while len(act_l) < decisions:
        rewards: list[float] = []
        done = False
        while not done:
            action = int(info["heuristic_action"])
            obs_l.append(obs)
            mask_l.append(env.action_masks())
            act_l.append(action)
            obs, reward, done, _, info = env.step(action)
            rewards.append(reward)
        ret_l.append(_discounted(rewards, gamma))
        totals.append(float(sum(rewards)))
        obs, info = env.reset()
    env.close()
    return Demonstrations(
        np.stack(obs_l),
        np.stack(mask_l),
        np.asarray(act_l, dtype=np.int64),
        np.concatenate(ret_l).astype(np.float32),
        totals,
    )


def _discounted(rewards: list[float], gamma: float) -> npt.NDArray[np.float32]:
    out = np.empty(len(rewards), dtype=np.float32)
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out


def clone(
    policy: Any,
    demos: Demonstrations,
    *,
    epochs: int = 8,
    batch_size: int = 256,
    lr: float = 1e-3,
    value_coef: float = 0.5,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``policy`` (a MaskablePPO policy) to ``demos``; one row of losses per epoch."""
    import torch as th

    gen = th.Generator().manual_seed(seed)
    obs = th.as_tensor(demos.obs)
    masks = th.as_tensor(demos.masks)
    actions = th.as_tensor(demos.actions)
    returns = th.as_tensor(demos.returns)
    optimiser = th.optim.Adam(policy.parameters(), lr=lr)
    history: list[dict[str, float]] = []
    policy.set_training_mode(True)
    for epoch in range(epochs):
        order = th.randperm(len(demos), generator=gen)
        ce_sum = v_sum = 0.0
        for start in range(0, len(demos), batch_size):
            idx = order[start : start + batch_size]
            values, log_prob, _ = policy.evaluate_actions(obs[idx], actions[idx], action_masks=masks[idx])
            ce = -log_prob.mean()
            v_loss = th.nn.functional.mse_loss(values.flatten(), returns[idx])
            loss = ce + value_coef * v_loss
            optimiser.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimiser.step()
            ce_sum += ce.item() * len(idx)
            v_sum += v_loss.item() * len(idx)
        row = {"epoch": epoch, "cross_entropy": ce_sum / len(demos), "value_mse": v_sum / len(demos)}
        history.append(row)
        if log:
            log(
                f"BC epoch {epoch}: cross-entropy {row['cross_entropy']:.4f}, "
                f"value MSE {row['value_mse']:.4f}"
            )
    policy.set_training_mode(False)
    return history


def agreement(policy: Any, demos: Demonstrations, batch_size: int = 2048) -> dict[str, float]:
    """How often ``policy``'s most likely allowed action is the teacher's: ``exact`` (the same
    node), ``tied`` (a node the profile scored as high as the teacher's pick, or the same action:
    about one decision in eight has several equally scored nodes, and no ranking can tell which
    one the heuristic's candidate order lists first)."""
    import torch as th

    score = NODE_COLUMNS.index("hub.score")
    width = len(NODE_COLUMNS)
    exact = tied = 0
    with th.no_grad():
        for start in range(0, len(demos), batch_size):
            sl = slice(start, start + batch_size)
            dist = policy.get_distribution(th.as_tensor(demos.obs[sl]), action_masks=demos.masks[sl])
            picked = dist.distribution.probs.argmax(dim=1).numpy()
            teacher = demos.actions[sl]
            same = picked == teacher
            slots = demos.masks.shape[1] - 1
            scores = demos.obs[sl, : slots * width].reshape(-1, slots, width)[:, :, score]
            rows = np.arange(len(teacher))
            nodes = (picked < slots) & (teacher < slots)
            level = np.isclose(
                scores[rows, np.minimum(picked, slots - 1)], scores[rows, np.minimum(teacher, slots - 1)]
            )
            exact += int(np.count_nonzero(same))
            tied += int(np.count_nonzero(same | (nodes & level)))
    n = max(len(demos), 1)
    return {"exact": exact / n, "tied": tied / n}
