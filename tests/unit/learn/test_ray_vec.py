"""Rollouts on Ray: the same environments in Ray actors step exactly as in this process."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")  # the [train] extra
pytest.importorskip("ray")  # the [ray] extra

import ray
from stable_baselines3.common.vec_env import DummyVecEnv

from controlplane.learn.curriculum import Curriculum, CurriculumEnv
from controlplane.learn.ppo import PPOConfig, make_vec_env, train

CURRICULUM = Curriculum(
    presets=("edge-battery",), loads=(1.3,), nodes=6, horizon_s=300.0, warmup_s=60.0, drain_s=600.0
)


def make_env() -> CurriculumEnv:
    return CurriculumEnv(CURRICULUM, max_nodes=8)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    # One local Ray for the module (its start takes seconds); two CPUs' worth of actors.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def _rollout(venv, steps: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    rng = np.random.default_rng(seed)
    venv.seed(seed)
    obs = venv.reset()
    seen, rewards, episodes = [obs], [], 0
    for _ in range(steps):
        masks = np.stack(venv.env_method("action_masks"))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, reward, done, infos = venv.step(actions)
        for d, info in zip(done, infos, strict=True):
            if d:
                episodes += 1
                assert "terminal_observation" in info
        seen.append(obs)
        rewards.append(reward)
    venv.close()
    return seen, rewards, episodes


def test_ray_actors_step_the_environments_exactly_as_in_process(local_ray: None) -> None:
    from controlplane.learn.ray_vec import RayVecEnv

    steps = 400  # past at least one episode's end (the reset inside step is covered)
    here_obs, here_rewards, here_episodes = _rollout(DummyVecEnv([make_env, make_env]), steps, seed=5)
    on_ray = RayVecEnv([make_env, make_env])
    assert on_ray.num_envs == 2 and on_ray.action_space.n == 9
    ray_obs, ray_rewards, ray_episodes = _rollout(on_ray, steps, seed=5)
    assert here_episodes == ray_episodes and here_episodes >= 1
    for a, b in zip(here_obs, ray_obs, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(here_rewards, ray_rewards, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_the_masks_come_with_each_answer_and_other_calls_reach_the_actors(local_ray: None) -> None:
    from controlplane.learn.ray_vec import RayVecEnv

    venv = RayVecEnv([make_env])
    try:
        venv.seed(3)
        venv.reset()
        cached = venv.env_method("action_masks")
        asked = ray.get(venv._actors[0].call.remote("action_masks", (), {}))  # the actor's own answer
        np.testing.assert_array_equal(cached[0], asked)
        assert venv.get_attr("max_nodes") == [8]
        assert venv.has_attr("action_masks") and not venv.has_attr("no_such_attribute")
    finally:
        venv.close()
    venv.close()  # twice is harmless


def test_ppo_on_ray_learns_the_same_weights_as_in_process(local_ray: None, tmp_path: Path) -> None:
    import torch as th

    cfg = PPOConfig(
        seed=1,
        timesteps=256,
        n_envs=2,
        vec="dummy",
        max_nodes=8,
        n_steps=128,
        batch_size=64,
        n_epochs=1,
        bc_decisions=0,
        curriculum=CURRICULUM,
    )
    train(cfg, tmp_path / "dummy", log=lambda _: None)
    report = train(replace(cfg, vec="ray"), tmp_path / "ray", log=lambda _: None)
    assert report["ppo"]["timesteps"] == 256
    from sb3_contrib import MaskablePPO

    a = MaskablePPO.load(tmp_path / "dummy" / "model.zip", device="cpu").policy.state_dict()
    b = MaskablePPO.load(tmp_path / "ray" / "model.zip", device="cpu").policy.state_dict()
    for name, tensor in a.items():
        assert th.equal(tensor, b[name]), name


def test_bad_vec_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="vec must be one of"):
        PPOConfig(vec="threads")
    with pytest.raises(ValueError, match="ray_address needs vec 'ray'"):
        PPOConfig(vec="subproc", ray_address="auto")
    with pytest.raises(ValueError, match="unknown vec backend"):
        make_vec_env("threads", [make_env])
