"""The exported placement policy (torch-free): the ONNX graph is the slot network, the chooser
runs it inside the scheduler's cycle exactly as the evaluation policy does in the environment,
int8 stays with fp32, and a model made for other columns is refused in one line."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from controlplane.learn.chooser import LearnedChooser, PlacementModelError, SlotObservationPolicy
from controlplane.learn.evaluate import Case, run_episode
from controlplane.learn.export import quantize
from controlplane.learn.gym_env import EdgeplaneSchedEnv
from controlplane.learn.observe import GLOBAL_COLUMNS, NODE_COLUMNS
from controlplane.learn.slot_model import SlotWeights, random_weights, save_model
from controlplane.sim.presets import get_preset
from controlplane.sim.runner import build_scenario

HORIZON_S = 600.0
TIMING = ("decision_ms", "decision_time_s", "pending_time_s", "wall_s")


def reference(weights: SlotWeights, x: np.ndarray) -> tuple[np.ndarray, float]:
    """The slot network in NumPy, as SlotExtractor computes it over candidate slots."""

    def mlp(h: np.ndarray, layers: Any) -> np.ndarray:
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = np.tanh(h)
        return h

    fleet = x[0, len(NODE_COLUMNS) :]
    pooled = mlp(x, weights.embed).mean(axis=0)
    defer = mlp(np.concatenate((pooled, fleet))[None, :], weights.defer)[0, 0]
    return mlp(x, weights.node)[:, 0], float(defer)


def rows(k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    fleet = rng.uniform(0, 1, len(GLOBAL_COLUMNS)).astype(np.float32)
    nodes = rng.uniform(-1, 4, (k, len(NODE_COLUMNS))).astype(np.float32)
    return np.concatenate((nodes, np.tile(fleet, (k, 1))), axis=1)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[SlotWeights, Path]:
    weights = random_weights(hidden=16, seed=7)
    return weights, save_model(weights, tmp_path_factory.mktemp("m") / "placement.fp32.onnx")


@pytest.mark.parametrize("k", [1, 5, 40, 300])
def test_the_graph_is_the_slot_network_for_any_number_of_candidates(model: Any, k: int) -> None:
    weights, path = model
    chooser = LearnedChooser(path)
    x = rows(k, seed=k)
    scores, defer = chooser.logits(x)
    want_scores, want_defer = reference(weights, x)
    assert scores.shape == (k,)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    assert defer == pytest.approx(want_defer, abs=1e-5)


def test_a_model_for_other_columns_or_of_another_kind_is_refused_in_one_line(
    model: Any, tmp_path: Path
) -> None:
    _, path = model
    other = onnx.load(str(path))
    for prop in other.metadata_props:
        if prop.key == "columns_digest":
            prop.value = "0000000000000000"
    onnx.save(other, str(tmp_path / "old.onnx"))
    with pytest.raises(PlacementModelError, match="other observation columns") as info:
        LearnedChooser(tmp_path / "old.onnx")
    assert "\n" not in str(info.value)
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(PlacementModelError, match="not a readable ONNX model"):
        LearnedChooser(tmp_path / "junk.onnx")
    with pytest.raises(PlacementModelError, match="no such file"):
        LearnedChooser(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="takes"):
        SlotWeights(
            node=random_weights().node[1:], embed=random_weights().embed, defer=random_weights().defer
        )


CASE = Case("edge-battery", 1.3, 4, 9, HORIZON_S, 10)


def _simulation(case: Case) -> Any:
    """The run the environment builds for ``case`` (gym_env's own construction), undriven."""
    built = build_scenario(
        get_preset(case.preset),
        hours=case.horizon_s / 3600,
        seed=case.seed,
        physics_seed=case.physics_seed,
        nodes=case.nodes,
        load=case.load,
    )
    return built.simulation(
        hours=case.horizon_s / 3600, scheduler_name="edgeplane", profile="edgeplane", seed=case.seed
    )


def _outcome(record: Any) -> dict[str, Any]:
    d = asdict(record)
    for key in TIMING:
        d.pop(key)
    return d


def test_the_chooser_in_simulate_decides_as_the_policy_does_in_the_environment(model: Any) -> None:
    """The same model drives Simulation.run() (LearnedChooser in the scheduler's cycle) and an
    environment episode (SlotObservationPolicy on the slot observation): the same run, bit for
    bit, so what `policy eval` measures is what the hub and `simulate` run."""
    _, path = model
    env = EdgeplaneSchedEnv(max_nodes=16)
    policy = SlotObservationPolicy(path)
    row = run_episode(env, policy, CASE)
    assert row["decisions"] > 50 and row["teacher_agreement"] < 1.0  # a random model: not the heuristic
    in_env = env.simulation
    assert in_env is not None

    sim = _simulation(CASE)
    chooser = LearnedChooser(path).attach(sim.sched)
    record = sim.run()
    assert chooser.decisions == row["decisions"]
    assert _outcome(record) == _outcome(in_env.record)
    env.close()


def test_without_defer_the_chooser_always_places_and_int8_stays_with_fp32(model: Any, tmp_path: Path) -> None:
    _, path = model
    int8 = quantize(path, tmp_path / "placement.int8.onnx")
    assert onnx.load(str(int8)).graph.node  # a real graph
    ops = {n.op_type for n in onnx.load(str(int8)).graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulInteger", "DynamicQuantizeLinear"}, ops
    env = EdgeplaneSchedEnv(max_nodes=16)
    shadowed = SlotObservationPolicy(path, shadow=int8)
    run_episode(env, shadowed, replace(CASE, seed=11, physics_seed=3))
    env.close()
    assert shadowed.decisions > 50
    # Random weights leave near-ties a trained policy does not have: a looser bar than export's.
    assert shadowed.agreement is not None and shadowed.agreement >= 0.9

    sim = _simulation(CASE)
    chooser = LearnedChooser(int8, allow_defer=False).attach(sim.sched)
    sim.run()
    assert chooser.decisions > 50 and chooser.deferred == 0
    assert chooser.describe()["decision_us_mean"] is not None
