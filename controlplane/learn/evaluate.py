"""Evaluate scheduling policies on held-out episodes of the stepping simulator (torch-free).

A policy here is a function ``(obs, mask, info) -> action``; :func:`heuristic` is the profile's
own pick (``info["heuristic_action"]``), which drives the very run ``controlplane simulate``
gives. Every policy runs the same held-out episodes (arrival seed x physics seed x preset x
load), and the result is ``{"policies": {NAME: {"mean_return", "sla_violation_rate",
"energy_kwh", "served_utilization"}}, "held_out": ..., "episodes": [...]}``; the per-episode
rows let a reader see where one policy wins and the other loses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.learn.observe import BoolMask, FloatObs
from controlplane.learn.reward import OutcomeWeights
from controlplane.sim.presets import Preset

__all__ = [
    "HELD_OUT_ARRIVAL_SEEDS",
    "HELD_OUT_PHYSICS_SEEDS",
    "METRICS",
    "Case",
    "Policy",
    "evaluate",
    "format_table",
    "held_out_cases",
    "heuristic",
    "run_episode",
]

HELD_OUT_ARRIVAL_SEEDS = (5151, 6262)
"""Arrival seeds of the evaluation (the issue's audit pair; training draws from 0..4999)."""
HELD_OUT_PHYSICS_SEEDS = (9191, 7373)
"""Physics seeds of the evaluation (training draws from 1..64)."""
METRICS = ("mean_return", "sla_violation_rate", "energy_kwh", "served_utilization")

Policy = Callable[[FloatObs, BoolMask, Mapping[str, Any]], int]


def heuristic(obs: FloatObs, mask: BoolMask, info: Mapping[str, Any]) -> int:
    """The scheduler profile's own choice."""
    return int(info["heuristic_action"])


@dataclass(frozen=True, slots=True)
class Case:
    """One held-out episode."""

    preset: str
    load: float
    seed: int
    physics_seed: int | None
    horizon_s: float = 3600.0
    nodes: int | None = 12

    def reset_options(self) -> dict[str, Any]:
        """The environment's reset options for this episode (its arrival seed goes separately)."""
        return {
            "preset": self.preset,
            "load": self.load,
            "physics_seed": self.physics_seed,
            "horizon_s": self.horizon_s,
            "nodes": self.nodes,
        }


def held_out_cases(
    presets: Sequence[str],
    loads: Sequence[float],
    arrival_seeds: Sequence[int] = HELD_OUT_ARRIVAL_SEEDS,
    physics_seeds: Sequence[int] = HELD_OUT_PHYSICS_SEEDS,
    *,
    horizon_s: float = 3600.0,
    nodes: int | None = 12,
) -> list[Case]:
    """Every preset x load x arrival seed x physics seed (seeds paired, not crossed: the issue's
    audit ran arrival 5151 with physics 9191 and 6262 with 7373)."""
    if len(arrival_seeds) != len(physics_seeds):
        raise ValueError("arrival_seeds and physics_seeds pair up: give as many of each")
    return [
        Case(p, float(load), a, ph, horizon_s, nodes)
        for p, load, (a, ph) in itertools.product(
            presets, loads, zip(arrival_seeds, physics_seeds, strict=True)
        )
    ]


def run_episode(env: EdgeplaneSchedEnv, policy: Policy, case: Case) -> dict[str, Any]:
    """One episode of ``case`` driven by ``policy``: its return and the run's summary figures."""
    obs, info = env.reset(seed=case.seed, options=case.reset_options())
    total, steps, agree, done = 0.0, 0, 0, False
    while not done:
        action = policy(obs, env.action_masks(), info)
        agree += action == info["heuristic_action"]
        obs, reward, done, _, info = env.step(action)
        total += reward
        steps += 1
    summary = info["summary"]
    return {
        **asdict(case),
        "return": total,
        "decisions": steps,
        "teacher_agreement": agree / max(steps, 1),
        **{k: float(summary[k]) for k in METRICS[1:]},
    }


def evaluate(
    policies: Mapping[str, Policy],
    cases: Iterable[Case],
    *,
    max_nodes: int = 16,
    weights: OutcomeWeights | None = None,
    presets: Mapping[str, Preset] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every policy on every case; the means per policy, and the per-episode rows. ``presets``:
    the environment's (default: the built-in ones)."""
    env = EdgeplaneSchedEnv(max_nodes=max_nodes, weights=weights, presets=presets)
    cases = list(cases)
    rows: list[dict[str, Any]] = []
    for name, policy in policies.items():
        for case in cases:
            row = {"policy": name, **run_episode(env, policy, case)}
            rows.append(row)
            if log:
                log(
                    f"{name} {case.preset} load {case.load} seed {case.seed}/{case.physics_seed}: "
                    f"return {row['return']:.2f}, SLA {100 * row['sla_violation_rate']:.2f}%"
                )
    env.close()
    means = {}
    for name in policies:
        mine = [r for r in rows if r["policy"] == name]
        means[name] = {
            "mean_return": float(np.mean([r["return"] for r in mine])),
            **{k: float(np.mean([r[k] for r in mine])) for k in METRICS[1:]},
            "teacher_agreement": float(np.mean([r["teacher_agreement"] for r in mine])),
        }
    held = {
        "presets": sorted({c.preset for c in cases}),
        "loads": sorted({c.load for c in cases}),
        "arrival_seeds": sorted({c.seed for c in cases}),
        "physics_seeds": sorted({c.physics_seed for c in cases if c.physics_seed is not None}),
        "horizon_s": sorted({c.horizon_s for c in cases}),
        "nodes": sorted({c.nodes for c in cases if c.nodes is not None}),
    }
    return {"policies": means, "held_out": held, "episodes": rows}


def format_table(result: Mapping[str, Any]) -> str:
    """The means as a Markdown table."""
    lines = [
        "| policy | mean return | SLA violations | energy (kWh) | served utilisation "
        "| agrees with heuristic |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, m in result["policies"].items():
        lines.append(
            f"| {name} | {m['mean_return']:.2f} | {100 * m['sla_violation_rate']:.2f}% | "
            f"{m['energy_kwh']:.3f} | {100 * m['served_utilization']:.2f}% | "
            f"{100 * m['teacher_agreement']:.1f}% |"
        )
    return "\n".join(lines)
