"""Canary rollout: the anomaly score, the controller's decisions, the chooser's groups, and a
bad policy rolled back (a good one promoted) in the simulator."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controlplane.cli import main
from controlplane.rollout import (
    AnomalyWindow,
    CanaryChooser,
    CanaryController,
    RolloutConfig,
    latency_vs_sla,
)
from controlplane.rollout.canary import OUTCOME_CAP
from controlplane.rollout.controller import Group
from controlplane.sim.runner import register_scheduler, run_comparison

FAST = RolloutConfig(steps=(0.1, 0.5, 1.0), dwell_s=600.0, sustain_s=120.0, recent=30, min_samples=30)


def test_the_anomaly_score_is_the_sources_formula() -> None:
    w = AnomalyWindow(size=300, percentile=95.0)
    assert w.baseline() is None and w.score(5.0) == 0.0
    for v in range(1, 401):  # the window keeps the latest 300: 101..400
        w.add(float(v))
    base = float(np.percentile(np.arange(101, 401, dtype=float), 95))
    assert w.baseline() == pytest.approx(base) and len(w) == 300
    assert w.score(base * 1.5) == pytest.approx(0.5)
    assert w.score(base * 0.5) == 0.0
    with pytest.raises(ValueError):
        AnomalyWindow(size=0)


def test_a_floor_lets_a_metric_that_sits_at_zero_have_anomalies() -> None:
    """The regret of a policy that decides as the objective does is 0: without a floor nothing
    deviates from a zero baseline in proportion; with one, a canary at 0.05 scores (0.05-0.01)/0.01."""
    bare, floored = AnomalyWindow(size=10), AnomalyWindow(size=10, floor=0.01)
    for _ in range(10):
        bare.add(0.0)
        floored.add(0.0)
    assert bare.score(0.05) == 0.0
    assert floored.score(0.05) == pytest.approx(4.0)
    assert floored.score(0.005) == 0.0
    floored.add(1.0)  # a baseline above the floor is the baseline
    assert floored.score(floored.baseline() * 2) == pytest.approx(1.0)  # type: ignore[operator]
    with pytest.raises(ValueError):
        AnomalyWindow(floor=-1)


def feed(
    c: CanaryController,
    rng: np.random.Generator,
    t0: float,
    t1: float,
    canary_scale: float,
    *,
    shift: float = 0.0,
) -> float:
    """One outcome a second, alternating groups by the controller's share."""
    t = t0
    while t < t1 and c.state == "canary":
        group: Group = "canary" if rng.random() < c.fraction else "control"
        value = rng.uniform(0.2, 0.6) * (canary_scale if group == "canary" else 1.0) + shift
        c.observe(group, value, t)
        t += 1.0
    return t


def test_an_equal_canary_steps_up_and_is_promoted() -> None:
    c = CanaryController(FAST)
    feed(c, np.random.default_rng(0), 0.0, 4000.0, canary_scale=1.0)
    assert c.state == "promoted" and c.fraction == 1.0
    assert [e.kind for e in c.events] == ["start", "step", "step", "promote"]
    assert [e.fraction for e in c.events] == [0.1, 0.5, 1.0, 1.0]
    steps = [e.t_s for e in c.events]
    assert all(b - a >= FAST.dwell_s for a, b in itertools.pairwise(steps))


def test_a_worse_canary_is_rolled_back_once_its_score_holds_over_the_threshold() -> None:
    c = CanaryController(FAST)
    feed(c, np.random.default_rng(1), 0.0, 4000.0, canary_scale=2.0)
    assert c.state == "rolled_back" and c.fraction == 0.0
    rollback = c.events[-1]
    assert rollback.kind == "rollback" and rollback.canary_score > FAST.threshold >= rollback.control_score
    assert "over 0.25 for" in rollback.reason
    # It did not wait for the dwell to end: the first step's canary share never grew.
    assert [e.kind for e in c.events] == ["start", "rollback"]


def test_a_short_spike_is_not_a_rollback() -> None:
    cfg = RolloutConfig(steps=(0.5, 1.0), dwell_s=10_000.0, sustain_s=300.0, recent=30, min_samples=30)
    c = CanaryController(cfg)
    rng = np.random.default_rng(2)
    t = feed(c, rng, 0.0, 600.0, canary_scale=1.0)
    t = feed(c, rng, t, t + 100.0, canary_scale=3.0)  # 100 s of a bad canary: under sustain_s
    feed(c, rng, t, t + 900.0, canary_scale=1.0)
    assert c.state == "canary" and [e.kind for e in c.events] == ["start"]


def test_what_hits_both_groups_is_not_the_canarys_fault() -> None:
    c = CanaryController(FAST)
    rng = np.random.default_rng(3)
    t = feed(c, rng, 0.0, 500.0, canary_scale=1.0)
    # The whole fleet gets slower at once (both groups): the control's own score rises too.
    feed(c, rng, t, t + 400.0, canary_scale=1.0, shift=1.0)
    assert c.state != "rolled_back"


@pytest.mark.parametrize(
    "kwargs",
    [{"steps": ()}, {"steps": (0.5, 0.2)}, {"steps": (0.0, 1.0)}, {"threshold": 0.0}, {"recent": 0}],
)
def test_bad_rollout_configs_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RolloutConfig(**kwargs)


def test_the_outcome_is_latency_over_sla_capped() -> None:
    assert latency_vs_sla(50.0, 100.0) == 0.5
    assert latency_vs_sla(None, 100.0) == OUTCOME_CAP  # never finished
    assert latency_vs_sla(10_000.0, 100.0) == OUTCOME_CAP
    assert latency_vs_sla(5.0, None) is None


class _Req:
    def __init__(self, wid: str) -> None:
        self.id = wid


class _Choice:
    def __init__(self, wid: str) -> None:
        self.request = _Req(wid)
        self.best = 0


def _choice(wid: str) -> Any:
    """What the chooser reads of a scheduler's Choice: the workload id and the profile's pick."""
    return _Choice(wid)


def test_the_chooser_keeps_a_stable_share_and_sends_everything_to_control_after_a_rollback() -> None:
    controller = CanaryController(RolloutConfig(steps=(0.3, 1.0)))
    chooser = CanaryChooser(lambda choice: 1, controller)
    picks = [chooser(_choice(f"w{i}")) for i in range(2000)]
    assert 0.25 < sum(picks) / len(picks) < 0.35
    assert [chooser(_choice(f"w{i}")) for i in range(50)] == picks[:50]  # sticky per workload
    controller.state = "rolled_back"
    assert all(chooser(_choice(f"w{i}")) == 0 for i in range(2000))
    group = chooser.group_of("w1")
    chooser.outcome("w1", 0.5, 1.0)  # counted under the group that placed it
    chooser.outcome("never-seen", 0.5, 1.0)  # never placed here: not counted
    assert controller.samples == {"canary": int(group == "canary"), "control": int(group == "control")}


def _worst(choice: Any) -> int:
    """A deliberately bad policy: the candidate the profile ranks lowest."""
    ranking = choice.ranking
    finite = np.flatnonzero(np.isfinite(ranking))
    return int(finite[np.argmin(ranking[finite])]) if len(finite) else choice.best


def test_in_the_simulator_a_bad_policy_is_rolled_back_and_an_equal_one_promoted() -> None:
    chooser: dict[str, CanaryChooser] = {}

    def canary(name: str, policy: Any) -> Any:
        def attach(sched: Any) -> CanaryChooser:
            chooser[name] = CanaryChooser(policy, CanaryController(FAST))
            return chooser[name].attach(sched)

        return attach

    register_scheduler("test-canary-bad", "edgeplane")
    register_scheduler("test-canary-good", "edgeplane")
    register_scheduler("test-bad-everywhere", "edgeplane")
    report = run_comparison(
        preset="edge-battery",
        schedulers=["edgeplane", "test-canary-bad", "test-canary-good", "test-bad-everywhere"],
        hours=1.0,
        seed=5,
        nodes=12,
        load=1.3,
        physics_seed=9,
        choosers={
            "test-canary-bad": canary("bad", _worst),
            "test-canary-good": canary("good", lambda choice: choice.best),
            "test-bad-everywhere": lambda sched: setattr(sched, "chooser", _worst),
        },
    )
    runs = report["runs"]
    bad, good = chooser["bad"].controller, chooser["good"].controller
    assert bad.state == "rolled_back" and bad.events[-1].kind == "rollback"
    assert good.state == "promoted" and [e.kind for e in good.events] == ["start", "step", "step", "promote"]
    assert runs["test-canary-bad"]["chooser"]["state"] == "rolled_back"  # in the report, with its timeline
    # The policy alone does real harm; the canary confined it to a few workloads.
    assert runs["test-bad-everywhere"]["sla_violation_rate"] > runs["edgeplane"]["sla_violation_rate"] + 0.05
    assert (
        runs["test-canary-bad"]["sla_violation_rate"]
        < 0.25 * runs["test-bad-everywhere"]["sla_violation_rate"]
    )
    # An equal policy changes nothing.
    assert runs["test-canary-good"]["sla_violation_rate"] == runs["edgeplane"]["sla_violation_rate"]


SHIPPED = Path(__file__).resolve().parents[3] / "controlplane" / "learn" / "model" / "placement.int8.onnx"


def test_simulate_rolls_a_model_out_as_a_canary_and_prints_its_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = main(
        [
            "simulate", "--preset", "edge-battery", "--nodes", "6", "--hours", "0.5", "--seed", "3",
            "--schedulers", "edgeplane", "--canary-model", str(SHIPPED), "--canary-steps", "0.2,1",
            "--canary-dwell", "300", "--canary-sustain", "60", "--quiet", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "canary: " in printed and "start" in printed
    described = json.loads(out.read_text())["runs"]["edgeplane-canary"]["chooser"]
    assert described["state"] in ("canary", "promoted", "rolled_back")
    assert described["events"][0]["kind"] == "start" and described["events"][0]["fraction"] == 0.2
    assert described["canary"]["model"] == str(SHIPPED)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--canary-steps", "0.5,0.2"], "--canary-steps"),
        (["--canary-threshold", "0"], "--canary-threshold"),
        (["--canary-model", "/no/such/model.onnx"], "--canary-model"),
    ],
)
def test_bad_canary_options_fail_at_start_in_one_line(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--preset", "edge-battery", "--hours", "0.1", "--quiet"]
    if "--canary-model" not in flags:
        args += ["--canary-model", str(SHIPPED)]
    code = main(args + flags)
    err = capsys.readouterr().err.strip()
    assert code == 2 and named in err and "\n" not in err
