"""Field logs: a deployed placement policy's decisions with their measured rewards, noised
before they leave the node (torch-free; the learner's side: it imports nothing of the simulator).

A :class:`FieldLog` holds, for every decision, the observation and mask the policy saw, the
action it took, the probability its (exploring) behaviour gave that action, and the reward
measured afterwards (the change of the run's measured outcomes, :mod:`.reward`), clipped and
perturbed with Laplace noise of scale ``2 * clip / epsilon`` (local differential privacy, as the
agents' own decision logs do: ``edge_agent/decisions.py``). Episode ends are kept so that
returns are summed within a run. :mod:`.field` makes such logs in the simulator;
:mod:`.finetune` learns from them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from controlplane.learn.observe import BoolMask, FloatObs

__all__ = ["ActionProbs", "FieldLog", "discounted_returns", "greedy", "laplace_noise"]

ActionProbs = Callable[[FloatObs, BoolMask, Mapping[str, Any]], npt.NDArray[np.float64]]
"""A behaviour policy: the probability of every action (0 where the mask forbids it)."""

LOG_VERSION = 1


def greedy(policy: Callable[[FloatObs, BoolMask, Mapping[str, Any]], int]) -> ActionProbs:
    """A deterministic policy as action probabilities (all on its pick)."""

    def probs(obs: FloatObs, mask: BoolMask, info: Mapping[str, Any]) -> npt.NDArray[np.float64]:
        out = np.zeros(len(mask))
        out[policy(obs, mask, info)] = 1.0
        return out

    return probs


def laplace_noise(
    rewards: npt.NDArray[np.float64], *, clip: float, epsilon: float | None, rng: np.random.Generator
) -> npt.NDArray[np.float32]:
    """``rewards`` clipped to [-clip, clip], plus Laplace(2 clip / epsilon) noise (None: no noise,
    the exact measured rewards: a log that never left the hub)."""
    if clip <= 0:
        raise ValueError("clip must be > 0")
    clipped = np.clip(rewards, -clip, clip)
    if epsilon is None:
        return clipped.astype(np.float32)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive number")
    return (clipped + rng.laplace(0.0, 2 * clip / epsilon, size=len(clipped))).astype(np.float32)


def discounted_returns(
    rewards: npt.NDArray[np.floating[Any]], ends: npt.NDArray[np.bool_], gamma: float
) -> npt.NDArray[np.float32]:
    """Each step's discounted return, summed within its episode (``ends`` marks each last step)."""
    out = np.empty(len(rewards), dtype=np.float32)
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if ends[i]:
            acc = 0.0
        acc = float(rewards[i]) + gamma * acc
        out[i] = acc
    return out


@dataclass(slots=True)
class FieldLog:
    """Logged decisions: ``obs`` (N, D), ``masks`` (N, A), ``actions`` (N,), ``behaviour_prob``
    (N,), ``rewards`` (N,, noised), ``ends`` (N,, the last step of each episode), ``meta``."""

    obs: npt.NDArray[np.float32]
    masks: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.int64]
    behaviour_prob: npt.NDArray[np.float32]
    rewards: npt.NDArray[np.float32]
    ends: npt.NDArray[np.bool_]
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.actions)

    def save(self, path: Path) -> None:
        """One ``.npz`` file (the meta as JSON inside)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            np.savez_compressed(
                f,
                obs=self.obs,
                masks=self.masks,
                actions=self.actions,
                behaviour_prob=self.behaviour_prob,
                rewards=self.rewards,
                ends=self.ends,
                meta=np.asarray(json.dumps({"version": LOG_VERSION, **self.meta})),
            )

    @classmethod
    def load(cls, path: Path) -> FieldLog:
        """A log :meth:`save` wrote; ``ValueError`` naming what is wrong with any other file."""
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{path}: not a field log ({exc})") from exc
        needed = ("obs", "masks", "actions", "behaviour_prob", "rewards", "ends", "meta")
        missing = [k for k in needed if k not in arrays]
        if missing:
            raise ValueError(f"{path}: not a field log (no {missing[0]!r} array)")
        meta = json.loads(str(arrays["meta"]))
        if meta.get("version") != LOG_VERSION:
            raise ValueError(f"{path}: field log version {meta.get('version')!r}, expected {LOG_VERSION}")
        n = len(arrays["actions"])
        if any(len(arrays[k]) != n for k in needed[:-1]):
            raise ValueError(f"{path}: the log's arrays differ in length")
        if n == 0:
            raise ValueError(f"{path}: the log holds no decisions")
        rows = np.arange(n)
        if not arrays["masks"][rows, arrays["actions"]].all():
            raise ValueError(f"{path}: a logged action is one its mask forbids")
        return cls(
            obs=arrays["obs"].astype(np.float32),
            masks=arrays["masks"].astype(bool),
            actions=arrays["actions"].astype(np.int64),
            behaviour_prob=arrays["behaviour_prob"].astype(np.float32),
            rewards=arrays["rewards"].astype(np.float32),
            ends=arrays["ends"].astype(bool),
            meta=meta,
        )
