"""MaskablePPO from behaviour cloning: a tiny real run is reproducible, starts at the teacher, evaluates."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib")  # torch and sb3-contrib come with the [train] extra, not [test]

import torch as th

from controlplane.cli import main
from controlplane.learn import bc
from controlplane.learn.curriculum import Curriculum
from controlplane.learn.evaluate import METRICS
from controlplane.learn.ppo import PPOConfig, load_policy, train


def tiny_config(seed: int) -> PPOConfig:
    cur = Curriculum(
        presets=("edge-battery",), loads=(1.3,), nodes=6, horizon_s=300.0, warmup_s=60.0, drain_s=600.0
    )
    return PPOConfig(
        seed=seed,
        timesteps=256,
        n_envs=1,
        vec="dummy",
        max_nodes=8,
        n_steps=128,
        batch_size=64,
        n_epochs=2,
        bc_decisions=1200,
        bc_epochs=16,
        curriculum=cur,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict, dict]:
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    quiet = lambda _m: None  # noqa: E731
    return a, b, train(tiny_config(3), a, log=quiet), train(tiny_config(3), b, log=quiet)


def weights(path: Path) -> dict[str, th.Tensor]:
    from sb3_contrib import MaskablePPO

    return MaskablePPO.load(path / "model.zip", device="cpu").policy.state_dict()


def test_the_same_seed_gives_the_same_weights(runs: tuple[Path, Path, dict, dict]) -> None:
    a, b, ra, rb = runs
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    assert all(th.equal(wa[k], wb[k]) for k in wa)
    assert ra["bc"]["agreement_train"] == rb["bc"]["agreement_train"]
    assert _same_but_wall(a / "curve.csv", b / "curve.csv")
    assert (a / "curve.png").stat().st_size > 0 and not ra["ppo"]["stopped_early"]
    assert (a / "bc.zip").exists()


def _same_but_wall(x: Path, y: Path) -> bool:
    """curve.csv rows equal except their wall-clock column."""

    def rows(p: Path) -> list[list[str]]:
        lines = [line.split(",") for line in p.read_text().splitlines()]
        col = lines[0].index("wall_s")
        return [r[:col] + r[col + 1 :] for r in lines]

    return rows(x) == rows(y)


def test_behaviour_cloning_starts_at_the_teacher(runs: tuple[Path, Path, dict, dict]) -> None:
    report = runs[2]["bc"]
    assert report["agreement_before"]["exact"] < 0.6
    # Up to ties in the profile's score (which no ranking can break as the heuristic does).
    assert report["agreement_train"]["tied"] >= 0.9
    assert report["agreement_validation"]["tied"] >= 0.85
    assert report["history"][-1]["cross_entropy"] < report["history"][0]["cross_entropy"]
    ppo = runs[2]["ppo"]
    assert ppo["timesteps"] >= 256 and ppo["updates"] == 2 and ppo["s_per_million_steps"] > 0


def test_the_wall_budget_stops_between_updates_and_says_so(tmp_path: Path) -> None:
    report = train(replace(tiny_config(5), bc_decisions=0, max_wall_s=0.0), tmp_path, log=lambda _m: None)
    assert report["ppo"]["stopped_early"] and report["ppo"]["updates"] == 0
    assert (tmp_path / "model.zip").exists()


def test_a_different_seed_gives_different_weights(
    runs: tuple[Path, Path, dict, dict], tmp_path: Path
) -> None:
    # Without cloning, to stay quick: the seed alone must change the run.
    train(replace(tiny_config(4), bc_decisions=0), tmp_path, log=lambda _m: None)
    wa, wc = weights(runs[0]), weights(tmp_path)
    assert not all(th.equal(wa[k], wc[k]) for k in wa)


def test_the_loaded_policy_picks_allowed_actions_and_eval_writes_the_schema(
    runs: tuple[Path, Path, dict, dict], tmp_path: Path
) -> None:
    model = runs[0]
    policy, cfg = load_policy(model)
    assert cfg == tiny_config(3)
    assert policy is not None
    out = tmp_path / "eval.json"
    rc = main(
        [
            "policy", "eval", "--algo", "ppo", "--model", str(model), "--json", str(out),
            "--presets", "edge-battery", "--loads", "1.3", "--arrival-seeds", "5151",
            "--physics-seeds", "9191", "--horizon", "120", "--nodes", "6",
        ]
    )  # fmt: skip
    assert rc == 0
    result = json.loads(out.read_text())
    # bc: the cloned start the run saved (bc.zip), so that PPO's own change is visible.
    assert set(result["policies"]) == {"heuristic", "ppo", "bc"}
    for m in result["policies"].values():
        assert set(METRICS) <= set(m)
    assert result["held_out"]["arrival_seeds"] == [5151] and result["held_out"]["physics_seeds"] == [9191]
    assert result["training"]["physics_seeds"] == [[1, 65]]
    # The cloned policy mostly makes the heuristic's choices on the held-out episode too.
    assert result["policies"]["ppo"]["teacher_agreement"] > 0.6


def test_bc_agreement_counts_ties_as_the_teachers_choice(runs: tuple[Path, Path, dict, dict]) -> None:
    from sb3_contrib import MaskablePPO

    cfg = tiny_config(3)
    model = MaskablePPO.load(runs[0] / "model.zip", device="cpu")
    demos = bc.collect(cfg.curriculum, decisions=200, seed=99, max_nodes=cfg.max_nodes)
    got = bc.agreement(model.policy, demos)
    assert 0.0 <= got["exact"] <= got["tied"] <= 1.0


def test_export_writes_the_trained_network_and_an_int8_model_that_chooses_as_it_does(
    runs: tuple[Path, Path, dict, dict], tmp_path: Path
) -> None:
    """`policy export --algo ppo`: the fp32 graph decides as the sb3 policy on every decision of
    a held-out episode, int8 stays within the bar, and the metadata says what was measured."""
    a = runs[0]
    out = tmp_path / "placement"
    argv = [
        "policy",
        "export",
        "--algo",
        "ppo",
        "--model",
        str(a),
        "--out",
        str(out),
        "--check-horizon",
        "300",
    ]
    assert main(argv) == 0
    meta = json.loads((out / "placement.json").read_text())
    checks = meta["checks"]
    assert checks["fp32_vs_trained"]["decisions"] > 100
    assert checks["fp32_vs_trained"]["share"] >= 0.999
    assert checks["int8_vs_fp32"]["near_share"] >= 0.99
    assert set(meta["files"]) == {"placement.fp32.onnx", "placement.int8.onnx"}
    assert meta["training"]["config"]["seed"] == 3
    assert main(["policy", "export", "--algo", "ppo", "--out", str(out)]) == 2  # no --model


def test_an_export_that_fails_its_checks_leaves_the_shipped_files_as_they_were(
    runs: tuple[Path, Path, dict, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.learn import export as export_module

    out = tmp_path / "placement"
    out.mkdir()
    (out / "placement.int8.onnx").write_bytes(b"the shipped one")
    monkeypatch.setattr(export_module, "AGREEMENT_BAR", 1.01)  # a bar no model can pass
    argv = [
        "policy",
        "export",
        "--algo",
        "ppo",
        "--model",
        str(runs[0]),
        "--out",
        str(out),
        "--check-horizon",
        "300",
    ]
    assert main(argv) == 1
    assert (out / "placement.int8.onnx").read_bytes() == b"the shipped one"
    assert not (out / "placement.json").exists() and not (out / ".staging").exists()
    assert (out / ".rejected" / "placement.json").exists()
