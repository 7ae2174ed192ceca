"""Training curricula: which preset, load and physics each training episode runs (torch-free).

A :class:`Curriculum` is a list of stages (preset x load, easiest load first) cycled one per
episode; the physics seed and the arrival seed of each episode are drawn from pools that the
held-out evaluation seeds (:mod:`.evaluate`) lie outside. :class:`CurriculumEnv` wraps
:class:`~.gym_env.EdgeplaneSchedEnv` and picks those reset options itself from an RNG seeded by
the first ``reset(seed=...)``, so a vector of such environments is reproducible from one seed.

It also says, per step, whether the action taken was the heuristic's own pick
(``info["teacher_agrees"]``), which the learning curve reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np

from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.learn.observe import FloatObs
from controlplane.learn.reward import OutcomeWeights
from controlplane.sim.presets import PRESETS, Preset

__all__ = [
    "TRAIN_ARRIVAL_SEEDS",
    "TRAIN_PHYSICS_SEEDS",
    "Curriculum",
    "CurriculumEnv",
]

TRAIN_ARRIVAL_SEEDS = range(0, 5000)
"""Arrival seeds training episodes draw from."""
TRAIN_PHYSICS_SEEDS = range(1, 65)
"""Physics seeds training episodes draw from (the held-out ones lie above)."""


@dataclass(frozen=True, slots=True)
class Curriculum:
    """Episodes' settings: stages cycled per episode, seeds drawn per episode."""

    presets: tuple[str, ...] = ("edge-battery", "seed-200")
    loads: tuple[float, ...] = (1.0, 1.3, 1.6, 2.0)
    physics_seeds: tuple[int, ...] = tuple(TRAIN_PHYSICS_SEEDS)
    arrival_seeds: tuple[int, int] = (TRAIN_ARRIVAL_SEEDS.start, TRAIN_ARRIVAL_SEEDS.stop)
    """[start, stop) of the arrival seeds."""
    nodes: int = 12
    """Each preset's fleet scaled to this many nodes."""
    horizon_s: float = 900.0
    warmup_s: float | None = 300.0
    """The presets' warm-up replaced by this (None: the preset's own); short episodes learn faster."""
    drain_s: float | None = 1800.0
    stages: tuple[tuple[str, float], ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.presets:
            raise ValueError("presets: give at least one preset")
        if not self.loads or not all(load > 0 for load in self.loads):
            raise ValueError("loads: give at least one positive load")
        if not self.physics_seeds:
            raise ValueError("physics_seeds: give at least one physics seed")
        lo, hi = self.arrival_seeds
        if not 0 <= lo < hi:
            raise ValueError("arrival_seeds: need 0 <= start < stop")
        unknown = [p for p in self.presets if p not in PRESETS]
        if unknown:
            raise ValueError(f"presets: unknown preset {unknown[0]!r} (known: {', '.join(sorted(PRESETS))})")
        # Easiest (lowest load) first: a policy cloned from the teacher meets harder loads later.
        stages = tuple((p, float(load)) for load in sorted(self.loads) for p in self.presets)
        object.__setattr__(self, "stages", stages)

    def preset(self, name: str) -> Preset:
        """The preset ``name`` with this curriculum's warm-up and drain."""
        base = PRESETS[name]
        return replace(
            base,
            warmup_s=base.warmup_s if self.warmup_s is None else self.warmup_s,
            drain_s=base.drain_s if self.drain_s is None else self.drain_s,
        )

    def options(self, episode: int, rng: np.random.Generator) -> tuple[int, dict[str, Any]]:
        """Episode ``episode``'s arrival seed and reset options (the stage cycles, seeds are drawn)."""
        name, load = self.stages[episode % len(self.stages)]
        physics = int(self.physics_seeds[int(rng.integers(len(self.physics_seeds)))])
        arrivals = int(rng.integers(*self.arrival_seeds))
        opts = {
            "preset": self.preset(name),
            "load": load,
            "physics_seed": physics,
            "horizon_s": self.horizon_s,
            "nodes": self.nodes,
        }
        return arrivals, opts

    def describe(self) -> dict[str, Any]:
        """JSON-able settings (for the model's config and the docs)."""
        d = asdict(self)
        d["physics_seeds"] = _ranges(self.physics_seeds)
        d["stages"] = [list(s) for s in self.stages]
        return d

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> Curriculum:
        """The inverse of :meth:`describe`."""
        kw = {k: v for k, v in d.items() if k != "stages"}
        kw["presets"] = tuple(kw["presets"])
        kw["loads"] = tuple(float(x) for x in kw["loads"])
        kw["physics_seeds"] = tuple(s for lo, hi in kw["physics_seeds"] for s in range(lo, hi))
        kw["arrival_seeds"] = tuple(kw["arrival_seeds"])
        return cls(**kw)


def _ranges(seeds: Sequence[int]) -> list[list[int]]:
    """``seeds`` as [start, stop) runs: compact and exact."""
    runs: list[list[int]] = []
    for s in sorted(set(seeds)):
        if runs and runs[-1][1] == s:
            runs[-1][1] = s + 1
        else:
            runs.append([s, s + 1])
    return runs


class CurriculumEnv(gym.Wrapper[FloatObs, np.int64, FloatObs, np.int64]):
    """An environment whose every reset runs the curriculum's next episode (module docstring)."""

    def __init__(self, curriculum: Curriculum, *, max_nodes: int = 16, weights: OutcomeWeights | None = None):
        super().__init__(EdgeplaneSchedEnv(max_nodes=max_nodes, weights=weights))
        self.curriculum = curriculum
        self.rng = np.random.default_rng(0)
        self.episode = 0
        self._teacher = -1

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[FloatObs, dict[str, Any]]:
        if seed is not None:
            # A seed restarts the sequence: the same seed gives the same episodes.
            self.rng = np.random.default_rng(seed)
            self.episode = 0
        arrivals, opts = self.curriculum.options(self.episode, self.rng)
        self.episode += 1
        obs, info = self.env.reset(seed=arrivals, options={**opts, **(options or {})})
        info["stage"] = (opts["preset"].name, opts["load"], opts["physics_seed"])
        self._teacher = int(info["heuristic_action"])
        return obs, info

    def step(self, action: Any) -> tuple[FloatObs, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["teacher_agrees"] = int(action) == self._teacher
        self._teacher = int(info["heuristic_action"])
        return obs, float(reward), terminated, truncated, info

    def action_masks(self) -> Any:
        """The inner environment's mask (sb3-contrib looks for this method on the env)."""
        env = self.env
        assert isinstance(env, EdgeplaneSchedEnv)
        return env.action_masks()
