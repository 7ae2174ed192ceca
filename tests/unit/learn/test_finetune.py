"""Offline fine-tuning from a field log: it moves the policy toward the logged actions that paid,
the KL term holds it near its start, and its output is a model the other commands take."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")  # torch and sb3-contrib come with the [train] extra, not [test]

from controlplane.cli import main
from controlplane.learn.curriculum import Curriculum
from controlplane.learn.evaluate import Case, heuristic
from controlplane.learn.field import collect, family_seeds
from controlplane.learn.field_log import FieldLog, greedy
from controlplane.learn.finetune import FinetuneConfig, behaviour_of, finetune
from controlplane.learn.ppo import PPOConfig, load_policy, train

QUIET = lambda _m: None  # noqa: E731


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny behaviour-cloned model (no PPO steps)."""
    cur = Curriculum(
        presets=("edge-battery",), loads=(1.3,), nodes=6, horizon_s=300.0, warmup_s=60.0, drain_s=600.0
    )
    cfg = PPOConfig(
        seed=1, timesteps=0, n_envs=1, vec="dummy", max_nodes=8, bc_decisions=800, bc_epochs=6, curriculum=cur
    )
    out = tmp_path_factory.mktemp("start")
    train(cfg, out, log=QUIET)
    return out


@pytest.fixture(scope="module")
def favouring_last(start: Path) -> FieldLog:
    """Uniformly explored decisions, each its own episode, paid 1 where the action was the last
    allowed one (the defer action when allowed) and 0 elsewhere."""
    seeds = family_seeds("knee", range(1, 65), count=2)
    cases = [Case("edge-battery", 1.3, 21 + i, s, 300.0, 6) for i, s in enumerate(seeds)]
    log = collect(greedy(heuristic), cases, explore=1.0, epsilon=None, clip=1.0, seed=5, max_nodes=8)
    last = np.array([np.flatnonzero(m)[-1] for m in log.masks])
    log.rewards = (log.actions == last).astype(np.float32)
    log.ends = np.ones(len(log), dtype=bool)
    return log


def _share_of_last(model_dir: Path, log: FieldLog) -> float:
    probs = behaviour_of(model_dir)
    picks = [int(np.argmax(probs(o, m, {}))) for o, m in zip(log.obs, log.masks, strict=True)]
    last = [int(np.flatnonzero(m)[-1]) for m in log.masks]
    return float(np.mean([p == q for p, q in zip(picks, last, strict=True)]))


def test_the_fine_tune_moves_the_policy_toward_what_paid(
    start: Path, favouring_last: FieldLog, tmp_path: Path
) -> None:
    cfg = FinetuneConfig(kl=0.0, beta=0.2, epochs=30, value_epochs=4, learning_rate=3e-3)
    report = finetune(start, favouring_last, tmp_path / "tuned", cfg=cfg, log=QUIET)
    before = _share_of_last(start, favouring_last)
    after = _share_of_last(tmp_path / "tuned", favouring_last)
    assert after > before + 0.2, (before, after)
    assert report["greedy_changed_share"] > 0.1
    assert report["log"]["decisions"] == len(favouring_last)


def test_the_kl_term_holds_the_policy_near_its_start(
    start: Path, favouring_last: FieldLog, tmp_path: Path
) -> None:
    free = finetune(
        start, favouring_last, tmp_path / "free", cfg=FinetuneConfig(kl=0.0, beta=0.2, epochs=10), log=QUIET
    )
    held = finetune(
        start, favouring_last, tmp_path / "held", cfg=FinetuneConfig(kl=50.0, beta=0.2, epochs=10), log=QUIET
    )
    assert held["actor"][-1]["kl_to_start"] < free["actor"][-1]["kl_to_start"] / 5
    assert held["greedy_changed_share"] < free["greedy_changed_share"]


def test_the_tuned_model_is_a_model_eval_takes_and_says_where_it_came_from(
    start: Path, favouring_last: FieldLog, tmp_path: Path
) -> None:
    finetune(
        start, favouring_last, tmp_path / "tuned", cfg=FinetuneConfig(epochs=1, value_epochs=1), log=QUIET
    )
    act, cfg = load_policy(tmp_path / "tuned")
    assert cfg.max_nodes == 8
    obs, mask = favouring_last.obs[0], favouring_last.masks[0]
    assert mask[act(obs, mask, {})]
    config = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert config["finetune"]["source"].endswith("model.zip")
    assert config["finetune"]["config"]["epochs"] == 1


def test_the_cli_logs_then_fine_tunes_and_says_what_is_wrong_in_one_line(
    start: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = tmp_path / "field.npz"
    common = ["policy", "field-log", "--model", str(start), "--presets", "edge-battery", "--nodes", "6"]
    assert main([*common, "--family", "lunar", "--out", str(log_path)]) == 2
    assert "unknown physics family 'lunar'" in capsys.readouterr().err
    assert (
        main(
            [
                *common,
                "--family",
                "knee",
                "--episodes",
                "1",
                "--horizon",
                "300",
                "--epsilon",
                "10",
                "--out",
                str(log_path),
            ]
        )
        == 0
    )
    logged = FieldLog.load(log_path)
    assert logged.meta["families"] == ["knee"] and logged.meta["epsilon"] == 10.0
    out = tmp_path / "tuned"
    assert (
        main(
            [
                "policy",
                "finetune",
                "--model",
                str(start),
                "--logs",
                str(log_path),
                "--out",
                str(out),
                "--epochs",
                "1",
            ]
        )
        == 0
    )
    assert (out / "model.zip").exists()
    capsys.readouterr()
    assert (
        main(
            [
                "policy",
                "finetune",
                "--model",
                str(tmp_path / "nowhere"),
                "--logs",
                str(log_path),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model: no model.zip in") and "\n" not in err
    assert (
        main(
            [
                "policy",
                "finetune",
                "--model",
                str(start),
                "--logs",
                str(tmp_path / "none.npz"),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "not a field log" in capsys.readouterr().err
