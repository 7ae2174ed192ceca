"""Hidden, per-seed physics: what the simulated fleet does that no scheduler is told.

A *physics seed* (``--physics-seed``, separate from the arrivals ``--seed``) draws the
interference model (knee, per-kind sensitivities, I/O penalty), the runtime-estimate error and
the power curves from documented ranges (``docs/scheduling.md``, "Hidden physics"). Seed
:data:`REFERENCE_PHYSICS_SEED` (and ``None``) is the reference physics: the preset's own
:class:`~.presets.ContentionModel`, 20 % estimate error and the nameplate power specs, exactly
what every run used before physics seeds existed.

Nothing under ``controlplane/scheduling`` or ``edgeplane_contract`` may import this module
(``tests/unit/sim/test_hidden_physics.py``): schedulers learn interference from observations.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgeplane_contract.power import DEFAULT_POWER_SPECS, PowerSpec

from controlplane.sim.presets import ContentionModel, Preset

__all__ = [
    "ORACLE",
    "PHYSICS_RANGES",
    "REFERENCE_ESTIMATE_ERROR",
    "REFERENCE_PHYSICS_SEED",
    "PhysicsParams",
    "draw_physics",
    "oracle_profile",
]

REFERENCE_PHYSICS_SEED = 0
REFERENCE_ESTIMATE_ERROR = 0.2

#: Uniform ranges of each drawn quantity (basis: docs/scheduling.md, "Hidden physics").
PHYSICS_RANGES: dict[str, tuple[float, float]] = {
    "knee": (0.55, 0.85),
    "sensitivity.service": (0.6, 1.6),
    "sensitivity.function": (0.6, 1.6),
    "sensitivity.analytics": (0.2, 1.0),
    "sensitivity.batch": (0.1, 0.6),
    "io_penalty": (0.05, 0.30),
    "estimate_error": (0.10, 0.40),
    "idle_scale": (0.8, 1.2),
    "dynamic_scale": (0.85, 1.15),
}


@dataclass(frozen=True, slots=True)
class PhysicsParams:
    """One draw of the hidden physics."""

    seed: int
    contention: ContentionModel
    estimate_error: float = REFERENCE_ESTIMATE_ERROR
    power_specs: Mapping[str, PowerSpec] = field(default_factory=lambda: dict(DEFAULT_POWER_SPECS))

    @property
    def sensitivity(self) -> dict[str, float]:
        return dict(self.contention.sensitivity)

    def to_dict(self) -> dict[str, object]:
        """What the run report records (the truth, for the reader; schedulers never get it)."""
        c = self.contention
        return {
            "seed": self.seed,
            "knee": round(c.knee, 4),
            "sensitivity": {k: round(v, 4) for k, v in c.sensitivity},
            "io_penalty": round(c.io_penalty, 4),
            "estimate_error": round(self.estimate_error, 4),
        }


def _scaled(spec: PowerSpec, idle: float, dynamic: float) -> PowerSpec:
    """Idle draw scaled by ``idle``; the dynamic range (max - idle) by ``dynamic``."""
    idle_w = spec.idle_w * idle
    return replace(spec, idle_w=idle_w, max_w=idle_w + (spec.max_w - spec.idle_w) * dynamic)


def draw_physics(preset: Preset, seed: int | None) -> PhysicsParams:
    """The physics of ``seed`` (``None`` or the reference seed: the preset's own constants)."""
    if seed is None or seed == REFERENCE_PHYSICS_SEED:
        return PhysicsParams(REFERENCE_PHYSICS_SEED, preset.contention)
    rng = np.random.default_rng([seed, 2024])

    def u(key: str) -> float:
        lo, hi = PHYSICS_RANGES[key]
        return float(rng.uniform(lo, hi))

    knee = u("knee")
    sensitivity = tuple(
        (kind, u(f"sensitivity.{kind}")) for kind in ("service", "function", "analytics", "batch")
    )
    contention = replace(preset.contention, knee=knee, sensitivity=sensitivity, io_penalty=u("io_penalty"))
    estimate_error = u("estimate_error")
    specs = {
        name: _scaled(spec, u("idle_scale"), u("dynamic_scale")) for name, spec in DEFAULT_POWER_SPECS.items()
    }
    return PhysicsParams(seed, contention, estimate_error, specs)


#: The scheduler name of :func:`oracle_profile` in ``controlplane simulate``.
ORACLE = "edgeplane-oracle"


def oracle_profile(physics: PhysicsParams) -> dict[str, Any]:
    """``edgeplane`` told the true interference physics (fixed): the bound learning aims at.

    Lives here, not in the scheduler's profiles, because only the simulator knows the truth."""
    from controlplane.scheduling.profiles import BUILTIN_PROFILES  # the sim may read profiles

    profile = copy.deepcopy(BUILTIN_PROFILES["edgeplane"])
    c = physics.contention
    profile["name"] = ORACLE
    profile["reward"] = {
        **profile["reward"],
        "interference": "fixed",
        "knee": c.knee,
        "sensitivity": dict(c.sensitivity),
        "io_penalty": c.io_penalty,
    }
    return profile
