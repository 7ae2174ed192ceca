"""The simulator as a Gymnasium environment: one step per replica the scheduler places.

An episode is one run of :class:`controlplane.sim.engine.Simulation`, the engine
``controlplane simulate`` runs, with the scheduler of a profile (``edgeplane`` by default) in
charge of everything but the choice of node: its Filter plugins make the action mask, its
post-filters (preemption, fragment merges), queue and gangs work as in any run. Each time a
cycle has scored its candidates the simulation pauses (a greenlet switch inside the scheduler's
cycle, :attr:`Scheduler.chooser`) and the agent picks:

* an action ``0 <= a < max_nodes``: the node in row ``a`` of the scheduler's node table, which
  the mask allows when it is a candidate of this cycle;
* ``max_nodes``: **defer**, place nothing now; the replica waits in the scheduler's queue and is
  offered again when capacity frees (always allowed). An action the mask rules out defers too
  (``info["invalid_action"]``).

``info["heuristic_action"]`` is the profile's own pick at the decision; driving the episode with
it gives the very run ``Simulation.run()`` gives (tests/unit/learn). Rewards are the change of
the measured outcomes' value between decisions (:mod:`.reward`); an episode ends (terminated)
when the run does, and its last ``info`` carries the run's summary (``controlplane.sim.metrics``).

Registries are values: the presets, the scheduler profiles and the plugin factories an
environment uses are given to it (default: copies of the built-in ones), so environments with
different settings share a process without touching process-global state.

``reset(seed=..., options=...)`` options (each defaults to the constructor's ``defaults``):
``preset`` (a name in ``presets`` or a ``Preset``) or ``trace`` (an Azure VM trace directory or
a loaded ``VmTrace``), ``physics_seed`` (None: the reference physics), ``load`` (offered load
factor), ``horizon_s`` (the measured window; a trace's replay is capped to it), ``nodes``
(scale the preset's fleet). ``seed`` draws the arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from greenlet import greenlet

from controlplane.learn.observe import BOUND, BoolMask, FloatObs, Observer
from controlplane.learn.reward import OutcomeWeights
from controlplane.scheduling.cycle import DEFER, Choice
from controlplane.scheduling.framework import PluginFactory
from controlplane.scheduling.plugins.registry import REGISTRY
from controlplane.sim.engine import Meter, Simulation
from controlplane.sim.metrics import summarise
from controlplane.sim.presets import PRESETS, Preset
from controlplane.sim.runner import SCHEDULERS, build_scenario
from controlplane.sim.vmreplay import VmSimulation, offered_cpu, size_fleet, vm_preset, vm_tasks
from controlplane.sim.vmtrace import BIN_S, VmTrace, load_vm_trace

__all__ = ["DEFAULT_OPTIONS", "EdgeplaneSchedEnv"]

DEFAULT_OPTIONS: Mapping[str, Any] = {
    "preset": "edge-battery",
    "trace": None,
    "physics_seed": None,
    "load": 1.0,
    "horizon_s": 3600.0,
    "nodes": None,
}
_OPTIONS = frozenset(DEFAULT_OPTIONS)


@dataclass(slots=True)
class _Episode:
    """One run in progress: the simulation, the greenlet it runs in, the pending decision."""

    sim: Simulation
    runner: greenlet
    choice: Choice | None
    meter: Meter


class EdgeplaneSchedEnv(gym.Env[FloatObs, np.int64]):
    """The scheduling simulator, stepped one placement decision at a time (module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        *,
        max_nodes: int = 64,
        scheduler: str = "edgeplane",
        weights: OutcomeWeights | None = None,
        defaults: Mapping[str, Any] | None = None,
        presets: Mapping[str, Preset] | None = None,
        schedulers: Mapping[str, str | Mapping[str, Any]] | None = None,
        plugins: Mapping[str, PluginFactory] | None = None,
    ) -> None:
        """``scheduler``: the name in ``schedulers`` (profiles) whose filters, scores and queue
        run the episode; ``weights``: the return's (:class:`.reward.OutcomeWeights`);
        ``defaults``: reset options used when a reset does not give them."""
        self.presets = dict(PRESETS if presets is None else presets)
        self.schedulers = dict(SCHEDULERS if schedulers is None else schedulers)
        self.plugins = dict(REGISTRY if plugins is None else plugins)
        if scheduler not in self.schedulers:
            raise ValueError(f"unknown scheduler {scheduler!r} (known: {', '.join(sorted(self.schedulers))})")
        self.scheduler = scheduler
        self.weights = weights or OutcomeWeights()
        self.defaults = _checked({**DEFAULT_OPTIONS, **(defaults or {})})
        self.observer = Observer(max_nodes)
        self.max_nodes = max_nodes
        self.observation_space = gym.spaces.Box(-BOUND, BOUND, shape=(self.observer.size,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(max_nodes + 1)
        self.defer = max_nodes
        """The defer action."""
        self._episode: _Episode | None = None
        self._mask: BoolMask = self.observer.empty()[1]

    # -- the Gymnasium API -----------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[FloatObs, dict[str, Any]]:
        super().reset(seed=seed)
        self._abandon()
        arrivals = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        opts = _checked({**self.defaults, **(options or {})})
        sim = self._simulation(arrivals, opts)
        if len(sim.nodes) > self.max_nodes:
            raise ValueError(f"the fleet has {len(sim.nodes)} nodes, more than max_nodes={self.max_nodes}")
        runner = greenlet(self._run)
        self._episode = _Episode(sim, runner, None, sim.meter())
        obs, info = self._advance(runner.switch(sim))
        info["seed"] = arrivals
        return obs, info

    def step(self, action: int | np.integer[Any]) -> tuple[FloatObs, float, bool, bool, dict[str, Any]]:
        episode = self._episode
        if episode is None or episode.choice is None:
            raise RuntimeError("the episode has ended: call reset()")
        index, invalid = self._index(episode.choice, int(action))
        before = episode.meter
        obs, info = self._advance(episode.runner.switch(index))
        reward = self.weights.reward(before, episode.meter)
        info["invalid_action"] = invalid
        return obs, reward, episode.choice is None, False, info

    def action_masks(self) -> BoolMask:
        """The actions allowed now: the cycle's candidate nodes and defer (sb3-contrib's form)."""
        return self._mask.copy()

    def close(self) -> None:
        self._abandon()
        super().close()

    # -- the run behind it -----------------------------------------------------------------

    @property
    def simulation(self) -> Simulation | None:
        """The run of the current episode (for its record and meter; None before a reset)."""
        return self._episode.sim if self._episode is not None else None

    def _simulation(self, seed: int, opts: Mapping[str, Any]) -> Simulation:
        profile = self.schedulers[self.scheduler]
        profile = dict(profile) if isinstance(profile, Mapping) else profile
        hours = float(opts["horizon_s"]) / 3600.0
        common: dict[str, Any] = {
            "scheduler_name": self.scheduler,
            "profile": profile,
            "seed": seed,
            "chooser": self._choose,
            "plugins": self.plugins,
        }
        if opts["trace"] is not None:
            trace = opts["trace"]
            if not isinstance(trace, VmTrace):
                trace = load_vm_trace(Path(trace), hours=hours)
            tasks = vm_tasks(trace, seed)
            horizon = min(trace.bins * BIN_S, float(opts["horizon_s"]))
            fleet = opts["nodes"] or size_fleet(offered_cpu(tasks, horizon)[1])
            return VmSimulation(vm_preset(int(fleet)), tasks, hours=horizon / 3600.0, **common)
        preset = opts["preset"]
        if isinstance(preset, str):
            if preset not in self.presets:
                raise ValueError(f"unknown preset {preset!r} (known: {', '.join(sorted(self.presets))})")
            preset = self.presets[preset]
        built = build_scenario(
            preset,
            hours=hours,
            seed=seed,
            physics_seed=opts["physics_seed"],
            nodes=opts["nodes"],
            load=float(opts["load"]),
        )
        return built.simulation(hours=hours, **common)

    @staticmethod
    def _run(sim: Simulation) -> None:
        """The episode's greenlet: the whole run; it pauses in _choose at every decision."""
        sim.run()

    def _choose(self, choice: Choice) -> int:
        """The scheduler's chooser, inside the run: hand the decision out, wait for the action."""
        episode = self._episode
        assert episode is not None and episode.runner is greenlet.getcurrent()
        index: int = episode.runner.parent.switch(choice)
        return index

    def _advance(self, pending: Choice | None) -> tuple[FloatObs, dict[str, Any]]:
        """Record where the run paused (a decision, or None: it ended) and observe it."""
        episode = self._episode
        assert episode is not None
        episode.choice = pending
        episode.meter = episode.sim.meter()
        info: dict[str, Any] = {"t": episode.sim.now, "meter": episode.meter}
        if pending is None:
            obs, self._mask = self.observer.empty()
            info["summary"] = summarise(episode.sim.record)
            info["heuristic_action"] = self.defer
        else:
            obs, self._mask = self.observer.observe(episode.sim.sched, pending)
            info["heuristic_action"] = int(pending.cand.rows[pending.best])
        return obs, info

    def _index(self, choice: Choice, action: int) -> tuple[int, bool]:
        """The action as the cycle's candidate index (or DEFER), and whether the mask forbade it."""
        if action == self.defer:
            return DEFER, False
        if 0 <= action < self.max_nodes and self._mask[action]:
            return int(np.flatnonzero(choice.cand.rows == action)[0]), False
        return DEFER, True

    def _abandon(self) -> None:
        """End a run still paused at a decision (its greenlet unwinds; nothing is kept)."""
        episode, self._episode = self._episode, None
        if episode is not None and not episode.runner.dead:
            episode.runner.throw()


def _checked(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The reset options, known names only, with a 400-style message naming the bad one."""
    unknown = sorted(set(opts) - _OPTIONS)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} (known: {', '.join(sorted(_OPTIONS))})")
    horizon = opts["horizon_s"]
    if not (isinstance(horizon, int | float) and math.isfinite(horizon) and horizon > 0):
        raise ValueError("horizon_s must be a positive number of seconds")
    load = opts["load"]
    if not (isinstance(load, int | float) and math.isfinite(load) and load > 0):
        raise ValueError("load must be a positive number")
    nodes = opts["nodes"]
    if nodes is not None and not (isinstance(nodes, int) and nodes > 0):
        raise ValueError("nodes must be a positive integer or None")
    return dict(opts)
