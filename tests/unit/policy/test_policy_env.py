"""The training environment: rewards equal reward(), seeds reproduce, held-out seeds differ."""

from __future__ import annotations

import numpy as np

from edgeplane_contract.policy.actions import DECLINE, DECLINE_REWARD, N_BINS, action_mask
from edgeplane_contract.policy.heuristic import action_rewards
from edgeplane_contract.policy.weights import effective_weights

from controlplane.policy.env import (
    EVAL_SEED_BASE,
    TRAINING_BATTERY_MULTIPLIER,
    EnvConfig,
    sample_state,
    sample_weights,
)
from controlplane.policy.samples import bin_terms, generate
from controlplane.policy.train import TrainConfig


def test_vectorised_terms_reproduce_reward_for_every_allowed_bin() -> None:
    samples = generate([EVAL_SEED_BASE + 11], 40, keep_cases=True)
    rewards = samples.rewards()
    checked = 0
    for i, (node, offer) in enumerate(samples.cases):
        w = samples.weights[i]
        exact = action_rewards(node, offer, (w[0], w[1], w[2], w[3]), samples.mask[i])
        assert np.array_equal(np.isfinite(exact), np.isfinite(rewards[i]))
        finite = np.isfinite(exact)
        np.testing.assert_allclose(rewards[i][finite], exact[finite], rtol=1e-5, atol=1e-5)
        checked += int(finite[:N_BINS].sum())
    assert checked > 100  # the states were not all fully masked


def test_terms_of_masked_bins_are_zero_and_decline_is_the_constant() -> None:
    rng = np.random.default_rng(3)
    node, offer = sample_state(rng)
    mask = action_mask(node, offer)
    terms = bin_terms(node, offer, mask)
    assert terms.shape == (N_BINS, 4)
    assert not terms[~mask[:N_BINS]].any()
    samples = generate([4], 5)
    assert (samples.rewards()[:, DECLINE] == DECLINE_REWARD).all()


def test_the_same_seed_draws_the_same_states_and_another_seed_does_not() -> None:
    a = generate([7], 30, with_terms=False)
    b = generate([7], 30, with_terms=False)
    c = generate([8], 30, with_terms=False)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.mask, b.mask)
    assert not np.array_equal(a.x, c.x)


def test_evaluation_seeds_are_disjoint_from_training_and_validation_seeds() -> None:
    cfg = TrainConfig()
    assert cfg.train_seeds <= cfg.val_seed_base < EVAL_SEED_BASE


def test_the_environment_covers_battery_nodes_gpu_offers_and_declines() -> None:
    samples = generate(range(EVAL_SEED_BASE + 12, EVAL_SEED_BASE + 14), 200, keep_cases=True)
    nodes = [node for node, _ in samples.cases]
    offers = [offer for _, offer in samples.cases]
    assert {n.node_type for n in nodes} >= {"edge", "cpu", "gpu"}
    assert any(n.on_battery for n in nodes) and any(o.gpu or o.mig for o in offers)
    best = samples.best_actions()
    assert 0.05 < (best == DECLINE).mean() < 0.8
    assert len(set(best.tolist())) > 5


def test_weights_on_battery_follow_the_adaptive_rule() -> None:
    rng = np.random.default_rng(5)
    cfg = EnvConfig(default_weights_probability=1.0, adaptive_probabilities=(1.0, 0.0, 0.0))
    for _ in range(50):
        node, _ = sample_state(rng, cfg)
        w = sample_weights(rng, node, cfg)
        # Training draws use the rule the shipped model was trained with (x2), not the runtime x4.
        assert w == effective_weights(
            (1.0, 2.0, 1.0, 4.0), node, battery_multiplier=TRAINING_BATTERY_MULTIPLIER
        )
