"""Hidden, per-seed physics: what the simulated fleet does that no scheduler is told.

A *physics seed* (``--physics-seed``, separate from the arrivals ``--seed``) draws a
:class:`~.presets.PhysicsFamily` (the functional form: ``knee``, ``convex-membw``, ``pairwise``,
``noisy-power``; ``--physics-family`` forces one), then the interference model (knee, per-kind
sensitivities, I/O penalty), the runtime-estimate error, the power curves and the family's own
parameters from documented ranges (``docs/scheduling.md``, "Hidden physics"). The family and
its parameters come from streams of their own, so a seed drawing ``knee`` has the same physics as
before families existed. Seed :data:`REFERENCE_PHYSICS_SEED` (and ``None``) without a forced
family is the reference physics: the preset's own :class:`~.presets.ContentionModel`, 20 %
estimate error and the nameplate power specs, exactly what every run used before physics seeds
existed.

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

from controlplane.sim.physics import PowerCurve
from controlplane.sim.presets import ContentionModel, PhysicsFamily, Preset

__all__ = [
    "FAMILIES",
    "FAMILY_RANGES",
    "ORACLE",
    "PHYSICS_RANGES",
    "REFERENCE_ESTIMATE_ERROR",
    "REFERENCE_PHYSICS_SEED",
    "PhysicsFamily",
    "PhysicsParams",
    "draw_family",
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

#: Every family, in the order a seed draws from (uniformly).
FAMILIES: tuple[PhysicsFamily, ...] = tuple(PhysicsFamily)
KINDS = ("service", "function", "analytics", "batch")

#: Uniform ranges of each family's own parameters (basis: docs/scheduling.md, "Hidden physics").
FAMILY_RANGES: dict[str, tuple[float, float]] = {
    "membw.amplitude": (0.5, 1.5),
    "membw.exponent": (1.5, 3.0),
    "membw.demand": (0.2, 1.2),  # per kind: bandwidth demand per CPU allocated
    "pairwise.effect": (0.0, 0.8),  # per ordered pair of kinds
    "power.exponent": (0.5, 2.0),  # per node: dynamic CPU power ~ utilisation ** exponent
    "power.noise": (0.02, 0.10),  # relative noise of the dynamic power at each load change
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

    @property
    def family(self) -> PhysicsFamily:
        return self.contention.family

    def to_dict(self) -> dict[str, object]:
        """What the run report records (the truth, for the reader; schedulers never get it)."""
        c = self.contention
        out: dict[str, object] = {
            "seed": self.seed,
            "family": str(c.family),
            "knee": round(c.knee, 4),
            "sensitivity": {k: round(v, 4) for k, v in c.sensitivity},
            "io_penalty": round(c.io_penalty, 4),
            "estimate_error": round(self.estimate_error, 4),
        }
        if c.family == PhysicsFamily.CONVEX_MEMBW:
            out["membw_amplitude"] = round(c.membw_amplitude, 4)
            out["membw_exponent"] = round(c.membw_exponent, 4)
            out["membw"] = {k: round(v, 4) for k, v in c.membw}
        elif c.family == PhysicsFamily.PAIRWISE:
            out["pairwise"] = {f"{a}x{b}": round(v, 4) for a, b, v in c.pairwise}
        else:
            curves = [s for s in self.power_specs.values() if isinstance(s, PowerCurve)]
            if curves:
                out["power_exponent"] = [round(x, 4) for x in curves[0].exponent_range]
                out["power_noise"] = round(curves[0].noise, 4)
        return out


def _scaled(spec: PowerSpec, idle: float, dynamic: float) -> PowerSpec:
    """Idle draw scaled by ``idle``; the dynamic range (max - idle) by ``dynamic``."""
    idle_w = spec.idle_w * idle
    return replace(spec, idle_w=idle_w, max_w=idle_w + (spec.max_w - spec.idle_w) * dynamic)


def draw_family(seed: int | None) -> PhysicsFamily:
    """The family physics seed ``seed`` draws (the reference seed: ``knee``)."""
    if seed is None or seed == REFERENCE_PHYSICS_SEED:
        return PhysicsFamily.KNEE
    # A stream of its own: the knee-form draws below stay what they were before families.
    return FAMILIES[int(np.random.default_rng([seed, 2025]).integers(len(FAMILIES)))]


def draw_physics(
    preset: Preset, seed: int | None, family: PhysicsFamily | str | None = None
) -> PhysicsParams:
    """The physics of ``seed`` (``None`` or the reference seed: the preset's own constants);
    ``family`` forces the functional form instead of the seed's draw."""
    family = draw_family(seed) if family is None else PhysicsFamily(family)
    if seed is None or seed == REFERENCE_PHYSICS_SEED:
        base = PhysicsParams(REFERENCE_PHYSICS_SEED, preset.contention)
    else:
        base = _draw_knee(preset, seed)
    return _with_family(base, family)


def _draw_knee(preset: Preset, seed: int) -> PhysicsParams:
    """Today's knee-form draw of ``seed`` (the base every family starts from)."""
    rng = np.random.default_rng([seed, 2024])

    def u(key: str) -> float:
        lo, hi = PHYSICS_RANGES[key]
        return float(rng.uniform(lo, hi))

    knee = u("knee")
    sensitivity = tuple((kind, u(f"sensitivity.{kind}")) for kind in KINDS)
    contention = replace(preset.contention, knee=knee, sensitivity=sensitivity, io_penalty=u("io_penalty"))
    estimate_error = u("estimate_error")
    specs = {
        name: _scaled(spec, u("idle_scale"), u("dynamic_scale")) for name, spec in DEFAULT_POWER_SPECS.items()
    }
    return PhysicsParams(seed, contention, estimate_error, specs)


def _with_family(base: PhysicsParams, family: PhysicsFamily) -> PhysicsParams:
    """``base`` with ``family``'s form and parameters (drawn from the seed's family stream)."""
    if family == PhysicsFamily.KNEE:
        return base
    rng = np.random.default_rng([base.seed, 2026])

    def u(key: str) -> float:
        lo, hi = FAMILY_RANGES[key]
        return float(rng.uniform(lo, hi))

    c = replace(base.contention, family=family)
    specs = dict(base.power_specs)
    if family == PhysicsFamily.CONVEX_MEMBW:
        amplitude, exponent = u("membw.amplitude"), u("membw.exponent")
        demand = tuple((kind, u("membw.demand")) for kind in KINDS)
        c = replace(c, membw_amplitude=amplitude, membw_exponent=exponent, membw=demand)
    elif family == PhysicsFamily.PAIRWISE:
        c = replace(c, pairwise=tuple((a, b, u("pairwise.effect")) for a in KINDS for b in KINDS))
    else:  # noisy-power: every node type's curve bent and noisy, each node its own exponent
        lo, hi = sorted((u("power.exponent"), u("power.exponent")))
        noise = u("power.noise")
        specs = {
            name: PowerCurve(**_spec_fields(spec), exponent_range=(lo, hi), noise=noise, seed=base.seed)
            for name, spec in specs.items()
        }
    return replace(base, contention=c, power_specs=specs)


def _spec_fields(spec: PowerSpec) -> dict[str, float]:
    return {name: getattr(spec, name) for name in PowerSpec.__dataclass_fields__}


#: The scheduler name of :func:`oracle_profile` in ``controlplane simulate``.
ORACLE = "edgeplane-oracle"


def oracle_profile(physics: PhysicsParams) -> dict[str, Any]:
    """``edgeplane`` told the true interference physics (fixed): the bound learning aims at.

    Lives here, not in the scheduler's profiles, because only the simulator knows the truth.
    The scheduler's model has the knee form, so this is the truth only under the ``knee`` and
    ``noisy-power`` families; under the others it is told the seed's knee-form draw (no bound)."""
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
