"""Field logs: decisions logged in one physics family with their measured rewards, noised for
privacy, saved and read back; torch-free (the fine-tune's own tests need the [train] extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controlplane.learn.evaluate import Case, heuristic, run_episode
from controlplane.learn.field import collect, family_seeds
from controlplane.learn.field_log import FieldLog, discounted_returns, greedy, laplace_noise
from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.sim.physics_params import draw_family

TINY = Case("edge-battery", 1.3, 11, None, 300.0, 4)


def tiny_cases() -> list[Case]:
    seeds = family_seeds("pairwise", range(1, 65), count=2)
    return [
        Case("edge-battery", 1.3, 11, seeds[0], 300.0, 4),
        Case("edge-battery", 1.6, 12, seeds[1], 300.0, 4),
    ]


def test_family_seeds_are_seeds_that_draw_the_family() -> None:
    for family in ("knee", "convex-membw", "pairwise", "noisy-power"):
        seeds = family_seeds(family, range(1, 200), count=3)
        assert len(seeds) == 3 and len(set(seeds)) == 3
        assert all(str(draw_family(s)) == family for s in seeds)


def test_family_seeds_refuse_an_unknown_family_and_a_range_too_short() -> None:
    with pytest.raises(ValueError, match="unknown physics family 'lunar'"):
        family_seeds("lunar", range(1, 10), count=1)
    with pytest.raises(ValueError, match=r"only .* physics seeds of family"):
        family_seeds("knee", range(1, 3), count=50)


def test_no_noise_gives_the_clipped_rewards_and_noise_is_laplace_of_the_stated_scale() -> None:
    rng = np.random.default_rng(0)
    rewards = np.array([-5.0, -0.5, 0.0, 0.25, 3.0])
    assert laplace_noise(rewards, clip=1.0, epsilon=None, rng=rng).tolist() == [-1.0, -0.5, 0.0, 0.25, 1.0]
    many = np.zeros(200_000)
    noised = laplace_noise(many, clip=1.0, epsilon=2.0, rng=rng).astype(np.float64)
    scale = 2 * 1.0 / 2.0  # sensitivity 2 * clip over epsilon
    assert abs(noised.mean()) < 0.02
    assert noised.var() == pytest.approx(2 * scale**2, rel=0.03)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_noise(many, clip=1.0, epsilon=0.0, rng=rng)


def test_returns_are_discounted_within_each_episode_only() -> None:
    rewards = np.array([1.0, 1.0, 1.0, 2.0, 2.0], dtype=np.float32)
    ends = np.array([False, False, True, False, True])
    got = discounted_returns(rewards, ends, 0.5)
    assert got.tolist() == [1.75, 1.5, 1.0, 3.0, 2.0]


def test_an_exact_log_of_the_heuristic_sums_to_its_episode_return() -> None:
    """No exploration, no noise, a clip above any step: the log is the episode, step by step."""
    log = collect(greedy(heuristic), [TINY], explore=0.0, epsilon=None, clip=1e9, max_nodes=8)
    env = EdgeplaneSchedEnv(max_nodes=8)
    episode = run_episode(env, heuristic, TINY)
    env.close()
    assert len(log) == episode["decisions"] > 10
    assert float(log.rewards.astype(np.float64).sum()) == pytest.approx(episode["return"], rel=1e-5, abs=1e-4)
    assert log.ends.tolist() == [False] * (len(log) - 1) + [True]
    assert (log.behaviour_prob == 1.0).all()
    assert log.masks[np.arange(len(log)), log.actions].all()


def test_exploring_logs_allowed_actions_with_the_mixtures_probabilities(tmp_path: Path) -> None:
    cases = tiny_cases()
    log = collect(greedy(heuristic), cases, explore=0.5, epsilon=1.0, clip=2.0, seed=3, max_nodes=8)
    rows = np.arange(len(log))
    assert log.masks[rows, log.actions].all()
    allowed = log.masks.sum(axis=1)
    # The heuristic's pick: 0.5 + 0.5 / allowed; any other allowed action: 0.5 / allowed.
    expected = {round(0.5 / a, 5) for a in allowed} | {round(0.5 + 0.5 / a, 5) for a in allowed}
    assert {round(float(p), 5) for p in log.behaviour_prob} <= expected
    assert (log.behaviour_prob < 1.0).any()  # it did explore
    assert int(log.ends.sum()) == len(cases)
    assert log.meta["families"] == ["pairwise"] and log.meta["epsilon"] == 1.0
    path = tmp_path / "field.npz"
    log.save(path)
    back = FieldLog.load(path)
    assert back.meta == {"version": 1, **log.meta}
    for name in ("obs", "masks", "actions", "behaviour_prob", "rewards", "ends"):
        assert np.array_equal(getattr(back, name), getattr(log, name)), name


def test_a_file_that_is_not_a_field_log_is_refused_by_name(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not numpy")
    with pytest.raises(ValueError, match=r"junk\.npz: not a field log"):
        FieldLog.load(junk)
    partial = tmp_path / "partial.npz"
    np.savez(partial, obs=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="no 'masks' array"):
        FieldLog.load(partial)


def test_a_log_whose_action_its_mask_forbids_is_refused(tmp_path: Path) -> None:
    log = FieldLog(
        obs=np.zeros((2, 3), dtype=np.float32),
        masks=np.array([[True, False], [False, True]]),
        actions=np.array([0, 0]),
        behaviour_prob=np.ones(2, dtype=np.float32),
        rewards=np.zeros(2, dtype=np.float32),
        ends=np.array([False, True]),
    )
    path = tmp_path / "forbidden.npz"
    log.save(path)
    with pytest.raises(ValueError, match="mask forbids"):
        FieldLog.load(path)
