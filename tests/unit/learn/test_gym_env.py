"""The stepping environment: Gymnasium's checks, masks, and the same run as Simulation.run()."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from controlplane.errors import ConfigError
from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.learn.observe import GLOBAL_COLUMNS, NODE_COLUMNS
from controlplane.learn.reward import OutcomeWeights
from controlplane.sim.presets import get_preset, scale_preset
from controlplane.sim.record import RunRecord
from controlplane.sim.runner import SCHEDULERS, build_scenario
from controlplane.sim.vmreplay import run_trace_comparison
from controlplane.sim.vmtrace import load_vm_trace

HORIZON_S = 600.0
AZURE_VM = Path(__file__).resolve().parents[2] / "fixtures" / "azure_vm"
# Wall-clock fields differ from run to run; everything else must not.
TIMING = ("decision_ms", "decision_time_s", "pending_time_s", "wall_s")


def small(name: str = "edge-battery", nodes: int = 12) -> Any:
    return replace(scale_preset(get_preset(name), nodes), warmup_s=300.0, drain_s=1800.0)


def env_for(preset: Any, **kw: Any) -> EdgeplaneSchedEnv:
    return EdgeplaneSchedEnv(max_nodes=24, defaults={"preset": preset, "horizon_s": HORIZON_S}, **kw)


def outcome(rec: RunRecord) -> dict[str, Any]:
    d = asdict(rec)
    for key in TIMING:
        d.pop(key)
    return d


def heuristic_episode(env: EdgeplaneSchedEnv, seed: int, physics_seed: int | None) -> tuple[float, int, dict]:
    _, info = env.reset(seed=seed, options={"physics_seed": physics_seed})
    first = info["meter"]
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, done, truncated, info = env.step(info["heuristic_action"])
        assert not truncated
        total += reward
        steps += 1
    return total - env.weights.value(info["meter"]) + env.weights.value(first), steps, info


def test_gymnasium_check_env_passes() -> None:
    env = env_for(small(nodes=8))
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize(("preset", "scheduler"), [("edge-battery", "edgeplane"), ("seed-200", "default")])
def test_the_heuristics_own_choices_give_the_run_of_simulation_run(preset: str, scheduler: str) -> None:
    """The key honesty test: stepping with the profile's pick is Simulation.run(), bit for bit."""
    env = env_for(small(preset, 16), scheduler=scheduler)
    drift, steps, info = heuristic_episode(env, seed=5, physics_seed=9)
    assert steps > 50
    sim = env.simulation
    assert sim is not None
    built = build_scenario(small(preset, 16), hours=HORIZON_S / 3600, seed=5, physics_seed=9)
    alone = built.simulation(hours=HORIZON_S / 3600, scheduler_name=scheduler, profile=scheduler, seed=5)
    record = alone.run()
    assert outcome(sim.record) == outcome(record)
    # The return is the change of the outcomes' value: it adds up to the run's totals.
    assert drift == pytest.approx(0.0, abs=1e-6)
    final = alone.meter()
    assert final.finished and info["meter"] == replace(final, t=info["meter"].t)
    summary = info["summary"]
    assert summary["sla_violation_rate"] == pytest.approx(
        final.sla_violations / max(1, sum(1 for t in record.tasks if t["sla_s"] is not None))
    )


def test_a_trace_episode_is_the_trace_replay() -> None:
    env = EdgeplaneSchedEnv(max_nodes=32, defaults={"trace": AZURE_VM, "horizon_s": 900.0})
    _, steps, info = heuristic_episode(env, seed=1, physics_seed=None)
    report = run_trace_comparison(load_vm_trace(AZURE_VM, hours=0.25), schedulers=["edgeplane"], seed=1)
    replay = report["runs"]["edgeplane"]
    assert steps >= replay["tasks"] > 100
    for key in (
        "tasks",
        "sla_violation_rate",
        "energy_kwh",
        "served_utilization",
        "p99_queue_s",
        "node_wakes",
    ):
        assert info["summary"][key] == replay[key], key


def test_masks_always_allow_defer_and_match_the_candidates() -> None:
    env = env_for(small())
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=2)
    width = len(NODE_COLUMNS)
    done, steps = False, 0
    while not done and steps < 400:
        mask = env.action_masks()
        assert mask.dtype == np.bool_ and mask.shape == (env.max_nodes + 1,)
        assert mask[env.defer] and mask.any()
        candidate = obs[: env.max_nodes * width].reshape(env.max_nodes, width)[:, -1] == 1.0
        assert np.array_equal(candidate, mask[:-1])
        assert mask[info["heuristic_action"]]
        action = int(rng.choice(np.flatnonzero(mask)))
        obs, _, done, _, info = env.step(action)
        assert not info["invalid_action"]
        steps += 1
    assert env.observation_space.shape == (env.max_nodes * width + len(GLOBAL_COLUMNS),)


def test_a_masked_out_action_defers_and_says_so() -> None:
    env = env_for(small())
    env.reset(seed=2)
    mask = env.action_masks()
    out = np.flatnonzero(~mask)
    assert len(out)  # padding slots past the fleet at least
    _, _, _, _, info = env.step(int(out[0]))
    assert info["invalid_action"]


def test_deferring_everything_serves_nothing_and_ends() -> None:
    env = env_for(small(nodes=6))
    env.reset(seed=4)
    done, total = False, 0.0
    while not done:
        _, reward, done, _, info = env.step(env.defer)
        total += reward
    summary = info["summary"]
    assert summary["served_utilization"] == 0.0
    assert summary["sla_violation_rate"] == 1.0
    assert total < 0


def test_two_environments_in_one_process_do_not_interfere() -> None:
    """Interleaved steps of two environments (other presets, schedulers) give each one's run alone."""

    def alone(env: EdgeplaneSchedEnv, seed: int) -> dict[str, Any]:
        heuristic_episode(env, seed, 3)
        assert env.simulation is not None
        return outcome(env.simulation.record)

    a = env_for(small("edge-battery", 10))
    b = env_for(small("mig-fragmentation", 12), scheduler="default", weights=OutcomeWeights(served=0.1))
    expected = (alone(a, 1), alone(b, 2))
    _, info_a = a.reset(seed=1, options={"physics_seed": 3})
    _, info_b = b.reset(seed=2, options={"physics_seed": 3})
    done = [False, False]
    while not all(done):
        for k, (env, info) in enumerate(((a, info_a), (b, info_b))):
            if done[k]:
                continue
            _, _, done[k], _, info = env.step(info["heuristic_action"])
            if k == 0:
                info_a = info
            else:
                info_b = info
    assert a.simulation is not None and b.simulation is not None
    assert (outcome(a.simulation.record), outcome(b.simulation.record)) == expected


def test_registries_are_the_environments_own_values() -> None:
    before = dict(SCHEDULERS)
    mine = {"mine": {"name": "mine", "plugins": [{"name": "NodeResourcesFit"}]}}
    env = env_for(small(nodes=6), scheduler="mine", schedulers=mine)
    env.reset(seed=1)
    assert SCHEDULERS == before
    with pytest.raises(ValueError, match="unknown scheduler 'edgeplane'"):
        env_for(small(), schedulers=mine)
    # The plugin factories come from the environment: without them its profile cannot build.
    bare = env_for(small(nodes=6), plugins={})
    with pytest.raises(ConfigError, match="unknown plugin"):
        bare.reset(seed=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"horizon": 60}, "unknown option 'horizon'"),
        ({"horizon_s": 0}, "horizon_s must be a positive"),
        ({"load": -1.0}, "load must be a positive"),
        ({"nodes": 2.5}, "nodes must be a positive integer"),
        ({"preset": "nope"}, "unknown preset 'nope'"),
        ({"preset": "seed-200"}, "more than max_nodes=24"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, Any], message: str) -> None:
    env = env_for(small())
    with pytest.raises(ValueError, match=message):
        env.reset(seed=1, options=options)


def test_step_after_the_end_asks_for_a_reset() -> None:
    env = env_for(small(nodes=6))
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_a_reset_mid_episode_starts_over_cleanly() -> None:
    env = env_for(small())
    first, _ = env.reset(seed=7)
    for _ in range(5):
        env.step(env.defer)
    again, _ = env.reset(seed=7)
    assert np.array_equal(first, again)
    env.close()
    assert env.simulation is None
