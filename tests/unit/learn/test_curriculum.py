"""The torch-free parts of PPO training: the curriculum, the held-out evaluation, the CLI's checks."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from controlplane.cli import main
from controlplane.learn.curriculum import TRAIN_ARRIVAL_SEEDS, TRAIN_PHYSICS_SEEDS, Curriculum, CurriculumEnv
from controlplane.learn.evaluate import (
    HELD_OUT_ARRIVAL_SEEDS,
    HELD_OUT_PHYSICS_SEEDS,
    METRICS,
    Case,
    evaluate,
    format_table,
    held_out_cases,
    heuristic,
)
from controlplane.learn.ppo import INSTALL_HINT, MissingTrainDeps, PPOConfig, require
from controlplane.policy.cli import _check_held_out
from controlplane.sim.presets import get_preset


def tiny_curriculum(**kw: Any) -> Curriculum:
    base: dict[str, Any] = {
        "presets": ("edge-battery", "seed-200"),
        "loads": (2.0, 1.0),
        "nodes": 6,
        "horizon_s": 300.0,
        "warmup_s": 60.0,
        "drain_s": 600.0,
    }
    return Curriculum(**{**base, **kw})


def test_stages_cycle_easiest_load_first_and_seeds_come_from_the_training_pools() -> None:
    cur = tiny_curriculum()
    assert cur.stages == (("edge-battery", 1.0), ("seed-200", 1.0), ("edge-battery", 2.0), ("seed-200", 2.0))
    rng = np.random.default_rng(1)
    picked = [cur.options(k, rng) for k in range(8)]
    assert [(o["preset"].name, o["load"]) for _, o in picked] == list(cur.stages) * 2
    for arrivals, opts in picked:
        assert arrivals in TRAIN_ARRIVAL_SEEDS
        assert opts["physics_seed"] in TRAIN_PHYSICS_SEEDS
        assert opts["preset"].warmup_s == 60.0 and opts["nodes"] == 6
    # The evaluation's seeds are never drawn in training.
    assert not set(HELD_OUT_ARRIVAL_SEEDS) & set(TRAIN_ARRIVAL_SEEDS)
    assert not set(HELD_OUT_PHYSICS_SEEDS) & set(TRAIN_PHYSICS_SEEDS)


def test_the_same_seed_gives_the_same_options() -> None:
    cur = tiny_curriculum()
    a = [cur.options(k, np.random.default_rng(7)) for k in range(3)]
    b = [cur.options(k, np.random.default_rng(7)) for k in range(3)]
    assert [(s, o["physics_seed"]) for s, o in a] == [(s, o["physics_seed"]) for s, o in b]


def test_description_round_trips() -> None:
    cur = tiny_curriculum(physics_seeds=(1, 2, 3, 10, 11))
    d = json.loads(json.dumps(cur.describe()))
    assert d["physics_seeds"] == [[1, 4], [10, 12]]
    assert Curriculum.from_description(d) == cur


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"presets": ()}, "presets"),
        ({"presets": ("nope",)}, "unknown preset 'nope'"),
        ({"loads": (0.0,)}, "loads"),
        ({"physics_seeds": ()}, "physics_seeds"),
        ({"arrival_seeds": (5, 5)}, "arrival_seeds"),
    ],
)
def test_bad_curricula_name_the_field(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_curriculum(**kw)


def test_the_wrapper_runs_the_curriculum_reproducibly_and_marks_the_teachers_actions() -> None:
    env = CurriculumEnv(tiny_curriculum(), max_nodes=8)
    first, info = env.reset(seed=3)
    stages = [info["stage"]]
    _, _, _, _, step_info = env.step(info["heuristic_action"])
    assert step_info["teacher_agrees"] is True
    _, _, _, _, step_info = env.step(env.unwrapped.defer)  # type: ignore[attr-defined]
    assert step_info["teacher_agrees"] is False
    for _ in range(3):
        _, info = env.reset()
        stages.append(info["stage"])
    assert [s[:2] for s in stages] == [
        ("edge-battery", 1.0),
        ("seed-200", 1.0),
        ("edge-battery", 2.0),
        ("seed-200", 2.0),
    ]
    again, info = env.reset(seed=3)
    assert np.array_equal(first, again) and info["stage"] == stages[0]
    assert env.action_masks().shape == (9,)


def test_held_out_cases_pair_the_seeds() -> None:
    cases = held_out_cases(["edge-battery"], [1.3, 2.0])
    assert [(c.load, c.seed, c.physics_seed) for c in cases] == [
        (1.3, 5151, 9191),
        (1.3, 6262, 7373),
        (2.0, 5151, 9191),
        (2.0, 6262, 7373),
    ]
    with pytest.raises(ValueError, match="pair up"):
        held_out_cases(["edge-battery"], [1.3], [1, 2], [3])


def test_the_heuristic_side_of_the_evaluation_has_the_schema() -> None:
    tiny = replace(get_preset("edge-battery"), name="tiny", warmup_s=60.0, drain_s=600.0)
    cases = [Case("tiny", 1.3, 5151, 9191, horizon_s=300.0, nodes=6)]
    result = evaluate(
        {"heuristic": heuristic, "defer": lambda o, m, i: 8}, cases, max_nodes=8, presets={"tiny": tiny}
    )
    result = json.loads(json.dumps(result))
    assert set(result["policies"]) == {"heuristic", "defer"}
    h, d = result["policies"]["heuristic"], result["policies"]["defer"]
    for m in (h, d):
        assert set(METRICS) <= set(m)
        assert 0.0 <= m["sla_violation_rate"] <= 1.0 and 0.0 <= m["served_utilization"] <= 1.0
        assert m["energy_kwh"] > 0
    assert h["teacher_agreement"] == 1.0
    # Deferring everything serves nothing: the measured outcomes, not a score, make the return.
    assert d["served_utilization"] == 0.0 and d["mean_return"] < h["mean_return"]
    assert result["held_out"]["arrival_seeds"] == [5151] and result["held_out"]["physics_seeds"] == [9191]
    assert len(result["episodes"]) == 2
    assert "| heuristic |" in format_table(result)


def test_evaluation_seeds_must_be_unseen_in_training() -> None:
    cur = tiny_curriculum()
    _check_held_out(cur, (5151,), (9191,))
    with pytest.raises(ValueError, match="--arrival-seeds: 12"):
        _check_held_out(cur, (12,), (9191,))
    with pytest.raises(ValueError, match="--physics-seeds: 3"):
        _check_held_out(cur, (5151,), (3,))


def test_missing_torch_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingTrainDeps, match="torch") as err:
        require()
    assert INSTALL_HINT in str(err.value) and "\n" not in str(err.value)


def test_the_cli_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sb3_contrib", None)
    assert main(["policy", "train", "--algo", "ppo", "--timesteps", "10", "--out", "unused"]) == 2
    assert INSTALL_HINT in capsys.readouterr().err
    assert main(["policy", "eval", "--algo", "ppo"]) == 2
    assert "--model" in capsys.readouterr().err


def test_missing_ray_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from controlplane.learn.ray_vec import RAY_HINT, MissingRay, require_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingRay, match="Ray") as err:
        require_ray()
    assert RAY_HINT in str(err.value) and "\n" not in str(err.value)


def test_the_cli_rejects_bad_lists(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["policy", "train", "--algo", "ppo", "--loads", "1.3,x"])
    assert "--loads" in capsys.readouterr().err


def test_ppo_config_round_trips_and_schedules_the_entropy_bonus() -> None:
    cfg = PPOConfig(seed=4, timesteps=1000, ent_start=0.01, ent_end=0.0, curriculum=tiny_curriculum())
    assert PPOConfig.from_description(json.loads(json.dumps(cfg.describe()))) == cfg
    assert [cfg.ent_coef(p) for p in (0.0, 0.5, 1.0, 2.0)] == pytest.approx([0.01, 0.005, 0.0, 0.0])
    with pytest.raises(ValueError, match="timesteps"):
        PPOConfig(timesteps=-1)
    with pytest.raises(ValueError, match="vec"):
        PPOConfig(vec="threads")
