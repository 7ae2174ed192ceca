"""Trainer, ONNX export, quantisation and the learned policy's quality on held-out seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeplane_contract.policy.actions import select_from_logits
from edgeplane_contract.policy.features import N_FEATURES, NodeView, Offer
from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH, LocalPolicy
from edgeplane_contract.policy.weights import DEFAULT_WEIGHTS

from controlplane.policy.evaluate import baseline_actions, evaluate_policies
from controlplane.policy.export import export_onnx
from controlplane.policy.quantize import choose, run_batch, session, write_metadata
from controlplane.policy.samples import EVAL_SEED_BASE, Samples, generate
from controlplane.policy.train import MLP, N_OUTPUTS, TrainConfig, mean_reward, split_heads, train

MODEL_DIR = DEFAULT_MODEL_PATH.parent


@pytest.fixture(scope="module")
def held_out() -> Samples:
    # Seeds far from the training (0..23), validation (9000) and export evaluation (10000..10002).
    return generate([EVAL_SEED_BASE + 40], 400)


def test_the_exported_graph_computes_the_numpy_mlp(tmp_path: Path) -> None:
    model = MLP.init((N_FEATURES, 16, 8, N_OUTPUTS), np.random.default_rng(0))
    path = export_onnx(model, tmp_path / "m.onnx")
    x = np.random.default_rng(1).random((32, N_FEATURES), dtype=np.float32)
    np.testing.assert_allclose(run_batch(session(path), x), model.forward(x), rtol=1e-4, atol=1e-5)


def test_an_exported_model_with_written_metadata_loads_and_decides(tmp_path: Path) -> None:
    model = MLP.init((N_FEATURES, 8, N_OUTPUTS), np.random.default_rng(2))
    export_onnx(model, tmp_path / "local_policy.int8.onnx")
    write_metadata(tmp_path, {"note": "test"})
    policy = LocalPolicy.load(str(tmp_path / "local_policy.int8.onnx"))
    # An fp32 graph under the int8 name is used, and reported as what it is.
    assert policy.uses_model and policy.source == "onnx-fp32", policy.fallback_reason
    assert policy.info()["quantized"] is False
    decision = policy.decide(NodeView("cpu", 64, 8, 256e9, 32e9), Offer(cpu=2, memory=4e9), DEFAULT_WEIGHTS)
    assert decision.source == "onnx-fp32"


def test_training_learns_the_teacher_beyond_an_untrained_network() -> None:
    data = generate([101], 250, weights_per_state=2)
    val = generate([102], 150)
    cfg = TrainConfig(steps=300, batch=128, hidden=(32,))
    untrained = MLP.init((N_FEATURES, 32, N_OUTPUTS), np.random.default_rng(cfg.seed))
    rewards = val.rewards()

    def reward_of(model: MLP) -> float:
        return mean_reward(rewards, select_from_logits(split_heads(model.forward(val.x))[1], val.mask))

    before = reward_of(untrained)
    model, report = train(cfg, data, val)
    after = reward_of(model)
    assert after > before + 0.02
    assert report["history"] and report["n_params"] == model.n_params()


def test_choose_prefers_reward_among_candidates_that_agree_enough() -> None:
    rows = [
        {"name": "a", "agreement_with_fp32": 0.995, "mean_reward": 0.20, "bare_p50_us": 9.0},
        {"name": "b", "agreement_with_fp32": 0.991, "mean_reward": 0.21, "bare_p50_us": 12.0},
        {"name": "c", "agreement_with_fp32": 0.980, "mean_reward": 0.25, "bare_p50_us": 5.0},
    ]
    assert choose(rows)["name"] == "b"
    assert choose([rows[2]])["name"] == "c"


def test_int8_agrees_with_fp32_on_held_out_states() -> None:
    held = generate(range(EVAL_SEED_BASE + 50, EVAL_SEED_BASE + 53), 1000, with_terms=False)
    int8 = select_from_logits(
        split_heads(run_batch(session(MODEL_DIR / "local_policy.int8.onnx"), held.x))[1], held.mask
    )
    fp32 = select_from_logits(
        split_heads(run_batch(session(MODEL_DIR / "local_policy.fp32.onnx"), held.x))[1], held.mask
    )
    assert (int8 == fp32).mean() >= 0.99


def test_the_learned_policy_nearly_matches_the_heuristic_and_beats_the_baselines(held_out: Samples) -> None:
    q = run_batch(session(MODEL_DIR / "local_policy.int8.onnx"), held_out.x)
    result = evaluate_policies(held_out, {"learned-int8": q})
    table = result["slices"]["all"]["policies"]
    heuristic = table["heuristic"]["mean_reward"]
    learned = table["learned-int8"]["mean_reward"]
    assert heuristic > 0 and learned >= 0.97 * heuristic
    for baseline in ("as-requested", "as-requested-if-positive", "random", "decline"):
        assert learned > table[baseline]["mean_reward"], baseline
    assert result["score_error"]["learned-int8"]["mean_abs"] < 0.1


def test_baselines_do_what_they_say(held_out: Samples) -> None:
    rewards = held_out.rewards()
    decline = baseline_actions(held_out, "decline", rewards)
    assert mean_reward(rewards, decline) == 0.0
    positive = baseline_actions(held_out, "as-requested-if-positive", rewards)
    assert (rewards[np.arange(len(positive)), positive] >= 0).all()
