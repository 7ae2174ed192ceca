"""LocalPolicy: the shipped model loads and decides; bad models fall back with one warning."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeplane_contract.policy.actions import ACTION_SPEC, DECLINE, N_BINS, action_mask, select_from_logits
from edgeplane_contract.policy.features import (
    FEATURE_SCHEMA_VERSION,
    N_FEATURES,
    NodeView,
    Offer,
    interference_prior,
)
from edgeplane_contract.policy.heuristic import action_rewards, best_action
from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH, LocalPolicy
from edgeplane_contract.policy.weights import DEFAULT_WEIGHTS, effective_weights

from controlplane.policy.samples import EVAL_SEED_BASE, generate

GB = 1e9
LOGGER = "edgeplane.agent.policy"


@pytest.fixture(scope="module")
def shipped() -> LocalPolicy:
    return LocalPolicy.load()


def _model_copy(tmp_path: Path) -> Path:
    for name in ("local_policy.int8.onnx", "metadata.json"):
        shutil.copyfile(DEFAULT_MODEL_PATH.parent / name, tmp_path / name)
    return tmp_path / "local_policy.int8.onnx"


def _edit_metadata(model: Path, **changes: object) -> None:
    path = model.parent / "metadata.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_the_shipped_int8_model_loads_with_matching_metadata(shipped: LocalPolicy) -> None:
    info = shipped.info()
    assert shipped.source == "onnx-int8" and info["fallback_reason"] is None
    assert info["quantized"] is True
    assert info["opset"] >= 13
    assert 0 < info["file_bytes"] < 1_000_000
    meta = info["metadata"]
    assert meta["feature_schema_version"] == FEATURE_SCHEMA_VERSION
    assert meta["n_features"] == N_FEATURES and meta["actions"] == ACTION_SPEC
    assert meta["interference_prior"] == interference_prior()


def test_a_corrupt_model_falls_back_to_the_heuristic_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model_copy(tmp_path)
    model.write_bytes(b"\x00garbage, not a protobuf\xff" * 40)
    _edit_metadata(model, files={})  # no checksum: onnxruntime itself must reject the bytes
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        policy = LocalPolicy.load(str(model))
        decision = policy.decide(NodeView("edge", 8, 1, 16 * GB, 2 * GB), Offer(cpu=1), DEFAULT_WEIGHTS)
        policy.decide(NodeView("edge", 8, 1, 16 * GB, 2 * GB), Offer(cpu=1), DEFAULT_WEIGHTS)
    assert policy.source == "heuristic" and decision.source == "heuristic"
    assert "onnxruntime cannot load it" in (policy.fallback_reason or "")
    records = _warnings(caplog)
    assert len(records) == 1 and "falling back to the reward heuristic" in records[0].getMessage()


def test_a_model_that_does_not_match_its_checksum_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model_copy(tmp_path)
    model.write_bytes(model.read_bytes() + b"tampered")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        policy = LocalPolicy.load(str(model))
    assert policy.source == "heuristic" and "checksum" in (policy.fallback_reason or "")
    assert len(_warnings(caplog)) == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"feature_schema_version": FEATURE_SCHEMA_VERSION + 1}, "feature_schema_version"),
        ({"n_features": N_FEATURES + 3}, "n_features"),
        # A model trained with another interference prior (e.g. the simulator's physics).
        ({"interference_prior": {"knee": 0.7, "sensitivity": {"service": 1.0}}}, "interference_prior"),
        ({"interference_prior": None}, "interference_prior"),
        ({"actions": {**ACTION_SPEC, "cpu_multipliers": [1.0, 2.0, 3.0, 4.0]}}, "actions.cpu_multipliers"),
    ],
)
def test_an_incompatible_model_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: dict[str, object], field: str
) -> None:
    model = _model_copy(tmp_path)
    _edit_metadata(model, **change)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        policy = LocalPolicy.load(str(model))
    assert policy.source == "heuristic"
    assert f"incompatible {field}" in (policy.fallback_reason or "")
    assert len(_warnings(caplog)) == 1


def test_unreadable_metadata_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _model_copy(tmp_path)
    (tmp_path / "metadata.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        policy = LocalPolicy.load(str(model))
    assert policy.source == "heuristic" and "unreadable metadata.json" in (policy.fallback_reason or "")
    assert len(_warnings(caplog)) == 1


def test_a_missing_model_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        policy = LocalPolicy.load(str(tmp_path / "nope.onnx"))
    assert policy.source == "heuristic" and policy.info()["file_bytes"] is None
    assert len(_warnings(caplog)) == 1


def test_decide_matches_the_batch_rule_the_trainer_evaluates(shipped: LocalPolicy) -> None:
    held = generate([EVAL_SEED_BASE + 5], 150, with_terms=False, keep_cases=True)
    logits = np.concatenate([shipped.outputs(x[None, :])[1] for x in held.x])
    batch = select_from_logits(logits, held.mask)
    for i, (node, offer) in enumerate(held.cases):
        w = tuple(held.weights[i])
        decision = shipped.decide(node, offer, (w[0], w[1], w[2], w[3]))
        assert decision.action == batch[i]
        assert decision.latency_us > 0


def test_the_heuristic_takes_the_best_allowed_reward_or_declines() -> None:
    held = generate([EVAL_SEED_BASE + 6], 30, keep_cases=True)
    teacher = held.best_actions()
    rewards = held.rewards()
    heuristic = LocalPolicy.heuristic()
    for i, (node, offer) in enumerate(held.cases):
        w = tuple(held.weights[i])
        decision = heuristic.decide(node, offer, (w[0], w[1], w[2], w[3]))
        exact = action_rewards(node, offer, w, held.mask[i])
        assert decision.action == best_action(exact)
        # Same choice as the trainer's teacher up to float32 storage of the terms.
        assert rewards[i, decision.action] >= rewards[i, teacher[i]] - 1e-5
        assert decision.score == pytest.approx(max(exact[decision.action], 0.0))


def test_a_node_without_room_declines_with_every_bin_masked(shipped: LocalPolicy) -> None:
    full = NodeView("edge", 8.0, 8.0, 16 * GB, 16 * GB)
    decision = shipped.decide(full, Offer(cpu=1.0, memory=GB), DEFAULT_WEIGHTS)
    assert decision.decline and decision.action == DECLINE
    assert decision.masked == N_BINS and decision.score == 0.0


def test_invalid_weights_are_rejected(shipped: LocalPolicy) -> None:
    node = NodeView("edge", 8.0, 1.0, 16 * GB, 2 * GB)
    for bad in ((1.0, 2.0, -1.0, 4.0), (1.0, float("nan"), 1.0, 4.0)):
        with pytest.raises(ValueError):
            shipped.decide(node, Offer(), bad)


# An idle edge box offered an edge-analytics job (4 cores, 8 GB, 5 min, remote input): on mains
# the reward prefers the largest CPU quota (x1.5: utilisation, and the job finishes sooner); on
# battery the agent's w3 rises (11.2-fold at 40%, 13.6-fold at 20%) and the extra watts are no
# longer worth it: the reward (the heuristic) takes x0.5 CPU from 40% down to 20%, and declines at
# 10%. The shipped model follows at 40%; at 20-30% it declines instead (a known miss, below).
EDGE = {
    "node_type": "edge",
    "cpu_capacity": 8.0,
    "cpu_allocated": 0.0,
    "memory_capacity": 16 * GB,
    "memory_allocated": 0.0,
    "idle_w": 6.0,
    "max_w": 30.0,
    "cpu_dynamic_w_per_core": 3.0,
    "power_ref_w": 420.0,
}
ANALYTICS = Offer(kind="analytics", cpu=4.0, memory=8 * GB, runtime_s=300.0, sla_s=720.0, transfer_s=10.0)


@pytest.mark.parametrize(
    ("policy_name", "percent"),
    [
        ("onnx-int8", 40.0),
        ("heuristic", 40.0),
        ("heuristic", 20.0),
        pytest.param(
            "onnx-int8",
            20.0,
            marks=pytest.mark.xfail(
                strict=True,
                reason="known miss of the model retrained on the reward prior (issue 13): at 20-30% "
                "charge it declines where the reward takes x0.5 CPU (R 0.124 at 20%)",
            ),
        ),
    ],
)
def test_going_on_battery_with_low_charge_changes_the_decision(
    shipped: LocalPolicy, policy_name: str, percent: float
) -> None:
    policy = shipped if policy_name == "onnx-int8" else LocalPolicy.heuristic()
    mains = NodeView(**EDGE, on_battery=False, battery_percent=None)  # type: ignore[arg-type]
    battery = NodeView(**EDGE, on_battery=True, battery_percent=percent)  # type: ignore[arg-type]
    w_mains = effective_weights(DEFAULT_WEIGHTS, mains)
    w_battery = effective_weights(DEFAULT_WEIGHTS, battery)
    gain = 1 + 3.0 * (1 - percent / 100)
    assert w_mains == DEFAULT_WEIGHTS and w_battery[2] == pytest.approx(1.0 * 4.0 * gain)
    on_mains = policy.decide(mains, ANALYTICS, w_mains)
    on_battery = policy.decide(battery, ANALYTICS, w_battery)
    assert on_mains.action != on_battery.action
    assert on_battery.decline or on_battery.cpu < on_mains.cpu
    assert on_battery.score < on_mains.score
    # And the exact reward agrees that the battery decision is the better one on battery.
    exact = action_rewards(battery, ANALYTICS, w_battery, action_mask(battery, ANALYTICS))
    assert exact[on_battery.action] >= exact[on_mains.action]


def test_decide_through_bound_buffers_matches_a_plain_session_run(shipped: LocalPolicy) -> None:
    """``decide`` writes into buffers bound to the session; the batch path uses ``session.run``.
    Both must give the same action and score on held-out states, call after call."""
    from edgeplane_contract.policy.features import features

    from controlplane.policy.env import sample_state, sample_weights

    rng = np.random.default_rng(EVAL_SEED_BASE + 31)
    for _ in range(300):
        node, offer = sample_state(rng)
        w = sample_weights(rng, node)
        decision = shipped.decide(node, offer, w)
        q, logits = shipped.outputs(features(node, offer, w)[None, :])
        expected = int(select_from_logits(logits, action_mask(node, offer)[None, :])[0])
        assert decision.action == expected
        if expected < N_BINS:
            assert decision.score == pytest.approx(float(q[0, expected]))


def test_decisions_carry_the_value_of_running_the_offer_as_requested(shipped: LocalPolicy) -> None:
    """``requested_score`` is the model's q (or the exact reward, for the heuristic) of the 1x/1x
    bin with the requested accelerator, and None when that bin does not fit."""
    from edgeplane_contract.policy.actions import requested_bin
    from edgeplane_contract.policy.features import features

    from controlplane.policy.env import sample_state, sample_weights

    heuristic = LocalPolicy.heuristic()
    rng = np.random.default_rng(EVAL_SEED_BASE + 32)
    seen_none = seen_value = 0
    for _ in range(120):
        node, offer = sample_state(rng)
        w = sample_weights(rng, node)
        b = requested_bin(offer)
        allowed = bool(action_mask(node, offer)[b])
        decision = shipped.decide(node, offer, w)
        exact = heuristic.decide(node, offer, w)
        if not allowed:
            assert decision.requested_score is None and exact.requested_score is None
            seen_none += 1
            continue
        seen_value += 1
        q, _ = shipped.outputs(features(node, offer, w)[None, :])
        assert decision.requested_score == pytest.approx(float(q[0, b]))
        rewards = action_rewards(node, offer, w, action_mask(node, offer))
        assert exact.requested_score == pytest.approx(float(rewards[b]))
    assert seen_none and seen_value  # both branches were exercised


def test_the_requested_bin_is_one_times_cpu_and_memory_with_the_requested_accelerator() -> None:
    from edgeplane_contract.policy.actions import (
        CPU_MULTIPLIERS,
        MEMORY_MULTIPLIERS,
        apply_bin,
        requested_bin,
    )

    cpu_offer = Offer(cpu=2.0, memory=4 * GB)
    assert apply_bin(cpu_offer, requested_bin(cpu_offer)) == (2.0, 4 * GB, 0.0, "none")
    mig_offer = Offer(cpu=1.0, memory=2 * GB, mig="1g.5gb")
    cpu, memory, _, accelerator = apply_bin(mig_offer, requested_bin(mig_offer))
    assert (cpu, memory, accelerator) == (1.0, 2 * GB, "mig:1g.5gb")
    assert 1.0 in CPU_MULTIPLIERS and 1.0 in MEMORY_MULTIPLIERS
