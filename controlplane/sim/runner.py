"""Run several schedulers side by side on the identical arrival sequence of a preset.

Scheduler names map to profiles in :data:`SCHEDULERS`; a learned policy registers its own name
with :func:`register_scheduler` (a profile naming its score plugin).

``power_manager`` runs every scheduler with the power manager on, off, or both (``both``: a
column ``NAME`` without it and ``NAME+pm`` with it), so that what the power manager saves is
not credited to the scheduler; ``None`` keeps the preset's setting (on in every built-in
preset). ``load`` scales the preset's arrival rates (:func:`~.presets.scale_load`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from controlplane.scheduling.profiles import BUILTIN_PROFILES
from controlplane.sim.battery import ADAPTIVE, FIXED, battery_comparison
from controlplane.sim.engine import Simulation
from controlplane.sim.metrics import summarise
from controlplane.sim.physics_params import ORACLE, PhysicsParams, draw_physics, oracle_profile
from controlplane.sim.presets import Preset, get_preset, scale_load, scale_preset
from controlplane.sim.workload import TaskSpec, generate_tasks

__all__ = [
    "DEFAULT_SCHEDULERS",
    "POWER_MANAGER_MODES",
    "SCHEDULERS",
    "Scenario",
    "build_scenario",
    "check_power_manager",
    "default_schedulers",
    "power_manager_runs",
    "register_scheduler",
    "run_comparison",
    "with_power_manager",
]

SCHEDULERS: dict[str, str | Mapping[str, Any]] = {name: name for name in BUILTIN_PROFILES}
# The two sides of the battery comparison (controlplane.sim.battery), by what they mean.
SCHEDULERS[ADAPTIVE] = "edgeplane"
SCHEDULERS[FIXED] = "edgeplane-fixed"
# edgeplane told the run's true interference physics (built per run; an upper bound, sim only).
SCHEDULERS[ORACLE] = "edgeplane-static"

#: What ``controlplane simulate`` runs when ``--schedulers`` is not given.
DEFAULT_SCHEDULERS: dict[str, list[str]] = {"edge-battery": [ADAPTIVE, FIXED]}
FALLBACK_SCHEDULERS = ["default", "binpack", "edgeplane"]
POWER_MANAGER_MODES = ("on", "off", "both", "forecast")
#: Suffix of a run with the power manager on, when ``both`` runs every scheduler twice.
PM_SUFFIX = "+pm"


def register_scheduler(name: str, profile: str | Mapping[str, Any]) -> None:
    """Make ``name`` selectable with ``--schedulers`` (profile: built-in name, file path or mapping)."""
    SCHEDULERS[name] = profile


def default_schedulers(preset: str) -> list[str]:
    """The runs of a preset when none are named."""
    return list(DEFAULT_SCHEDULERS.get(preset, FALLBACK_SCHEDULERS))


def _data_nodes(preset: Preset) -> list[str]:
    return [
        f"{g.prefix}-{k:03d}" for g in preset.groups if g.node_type in ("cpu", "edge") for k in range(g.count)
    ]


def with_power_manager(preset: Preset, enabled: bool, *, forecast: bool = False) -> Preset:
    """The preset with its power manager switched on or off, its CPU reserve fixed or sized from
    a demand forecast (its other settings kept)."""
    pm = preset.power_manager
    if pm.enabled == enabled and pm.forecast == forecast:
        return preset
    return replace(preset, power_manager=replace(pm, enabled=enabled, forecast=forecast))


def check_power_manager(mode: str | None) -> None:
    """ValueError unless ``mode`` is one of :data:`POWER_MANAGER_MODES` or None (the preset's)."""
    if mode is not None and mode not in POWER_MANAGER_MODES:
        raise ValueError(f"power_manager must be one of {', '.join(POWER_MANAGER_MODES)} or None")


def power_manager_runs(
    schedulers: list[str], mode: str | None, preset: Preset
) -> Iterator[tuple[str, str, Preset]]:
    """(run name, scheduler name, scenario) for each run the mode asks for."""
    for name in schedulers:
        if mode is None:
            yield name, name, preset
        elif mode == "both":
            yield name, name, with_power_manager(preset, False)
            yield name + PM_SUFFIX, name, with_power_manager(preset, True)
        elif mode == "forecast":
            yield name, name, with_power_manager(preset, True, forecast=True)
        else:
            yield name, name, with_power_manager(preset, mode == "on")


@dataclass(frozen=True, slots=True)
class Scenario:
    """What every run of a comparison shares: the fleet and load, the hidden physics, the arrivals."""

    preset: Preset
    physics: PhysicsParams
    tasks: list[TaskSpec]

    def simulation(self, *, hours: float, **kwargs: Any) -> Simulation:
        """A run of the scenario (``kwargs``: :class:`~.engine.Simulation`'s others, e.g. ``profile``)."""
        return Simulation(self.preset, self.tasks, hours=hours, physics=self.physics, **kwargs)


def build_scenario(
    preset: Preset,
    *,
    hours: float,
    seed: int,
    physics_seed: int | None,
    nodes: int | None = None,
    load: float = 1.0,
    physics_family: str | None = None,
) -> Scenario:
    """The preset scaled to ``nodes`` and ``load``, its physics drawn from ``physics_seed``
    (None: the reference constants; ``physics_family`` forces the form) and its arrivals from
    ``seed``: what :func:`run_comparison` and the stepping environment (``controlplane.learn``)
    simulate."""
    scenario = scale_preset(preset, nodes) if nodes else preset
    scenario = scale_load(scenario, load)
    physics = draw_physics(scenario, physics_seed, physics_family)
    tasks = generate_tasks(
        scenario, hours, seed, data_nodes=_data_nodes(scenario), estimate_error=physics.estimate_error
    )
    return Scenario(scenario, physics, tasks)


def run_comparison(
    *,
    preset: str | Preset,
    schedulers: list[str],
    hours: float,
    seed: int,
    nodes: int | None = None,
    progress: Callable[[str, float, tuple[float, float]], None] | None = None,
    physics_seed: int | None = None,
    power_manager: str | None = None,
    load: float = 1.0,
    physics_family: str | None = None,
    choosers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Any]:
    """Simulate each scheduler on the same tasks; returns the JSON report.

    ``choosers``: scheduler name -> a function given that run's scheduler that becomes its
    chooser (e.g. a learned placement policy, :mod:`controlplane.learn.chooser`) and returns it;
    its ``describe()``, where it has one, is the run's ``chooser`` entry.

    ``physics_seed``: the hidden physics (None: the reference constants, see .physics_params);
    ``physics_family``: its functional form (None: the seed draws it);
    ``power_manager``: on, off or both (None: as the preset says); ``load``: offered load x F."""
    check_power_manager(power_manager)
    base = get_preset(preset) if isinstance(preset, str) else preset
    built = build_scenario(
        base,
        hours=hours,
        seed=seed,
        physics_seed=physics_seed,
        nodes=nodes,
        load=load,
        physics_family=physics_family,
    )
    scenario, physics, tasks = built.preset, built.physics, built.tasks
    results: dict[str, Any] = {}
    for run_name, name, run_scenario in power_manager_runs(schedulers, power_manager, scenario):
        profile = oracle_profile(physics) if name == ORACLE else SCHEDULERS[name]
        sim = Simulation(
            run_scenario,
            tasks,
            scheduler_name=run_name,
            profile=dict(profile) if isinstance(profile, Mapping) else profile,
            hours=hours,
            seed=seed,
            progress=progress,
            physics=physics,
        )
        chooser = choosers[name](sim.sched) if choosers and name in choosers else None
        sim.on_resolved = getattr(chooser, "on_resolved", None)  # a canary's outcomes
        results[run_name] = summarise(sim.run())
        if chooser is not None and hasattr(chooser, "describe"):
            results[run_name]["chooser"] = chooser.describe()
    report: dict[str, Any] = {
        "runs": results,
        # The key before ``runs``; the same objects, kept so older readers still work.
        "schedulers": results,
        "preset": scenario.name,
        "seed": seed,
        "physics_seed": physics.seed,
        "physics_family": str(physics.family),
        "physics": physics.to_dict(),
        "hours": hours,
        "nodes": scenario.node_count,
        "tasks_generated": len(tasks),
        "tasks_measured": sum(1 for t in tasks if t.measured),
        "load": load,
        "power_manager": power_manager or ("on" if scenario.power_manager.enabled else "off"),
    }
    if results:
        # The same for every run (the arrivals are shared): the work offered over the fleet.
        report["offered_utilization"] = next(iter(results.values()))["offered_utilization"]
    comparison = battery_comparison(results)
    if comparison is not None:
        report["battery_comparison"] = comparison
    return report
