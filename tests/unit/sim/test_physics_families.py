"""Physics families: a seed draws its form (or one is forced), each form changes outcomes, the
reference seed is today's physics, and the power manager orders nodes alike for every scheduler."""

from __future__ import annotations

import pytest

from controlplane.cli import main
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.physics import PowerCurve, build_fleet
from controlplane.sim.physics_params import (
    FAMILY_RANGES,
    PhysicsFamily,
    PhysicsParams,
    draw_family,
    draw_physics,
)
from controlplane.sim.power_manager import PowerManager
from controlplane.sim.presets import EDGE_BATTERY, SEED_200, get_preset, scale_preset
from controlplane.sim.runner import run_comparison

FAMILIES = [f.value for f in PhysicsFamily]


def test_the_family_draw_is_deterministic_and_covers_every_family() -> None:
    drawn = [draw_family(seed) for seed in range(1, 41)]
    assert drawn == [draw_family(seed) for seed in range(1, 41)]
    assert set(drawn) == set(PhysicsFamily)
    for seed in (3, 4, 5, 7):
        physics = draw_physics(SEED_200, seed)
        assert physics == draw_physics(SEED_200, seed)
        assert physics.family == drawn[seed - 1]


def test_the_reference_seed_is_the_knee_and_the_presets_constants() -> None:
    for seed in (None, 0):
        assert draw_family(seed) == PhysicsFamily.KNEE
        physics = draw_physics(SEED_200, seed)
        assert physics == PhysicsParams(0, SEED_200.contention)
        assert physics.to_dict()["family"] == "knee"
        assert not any(isinstance(s, PowerCurve) for s in physics.power_specs.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_a_forced_family_keeps_the_seeds_knee_form_draws(family: str) -> None:
    """The family and its parameters come from streams of their own: the base draw is the seed's."""
    knee = draw_physics(SEED_200, 5, "knee")
    forced = draw_physics(SEED_200, 5, family)
    assert forced.family == family
    c, k = forced.contention, knee.contention
    assert (c.knee, c.sensitivity, c.io_penalty) == (k.knee, k.sensitivity, k.io_penalty)
    assert forced.estimate_error == knee.estimate_error
    if family == "convex-membw":
        lo, hi = FAMILY_RANGES["membw.exponent"]
        assert lo <= c.membw_exponent <= hi and len(c.membw) == 4
    if family == "pairwise":
        lo, hi = FAMILY_RANGES["pairwise.effect"]
        assert len(c.pairwise) == 16 and all(lo <= e <= hi for _, _, e in c.pairwise)
    if family == "noisy-power":
        assert all(isinstance(s, PowerCurve) and s.noise > 0 for s in forced.power_specs.values())


def _outcomes(family: str) -> dict[str, float]:
    report = run_comparison(
        preset="seed-200",
        schedulers=["default"],
        hours=0.1,
        seed=3,
        nodes=16,
        physics_seed=5,
        physics_family=family,
    )
    assert report["physics_family"] == family and report["physics"]["family"] == family
    run = report["runs"]["default"]
    return {
        k: run[k] for k in ("sla_violation_rate", "p99_task_latency_s", "mean_power_w", "mean_utilization")
    }


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, float]]:
    return {family: _outcomes(family) for family in FAMILIES}


@pytest.mark.parametrize("family", ["convex-membw", "pairwise"])
def test_each_interference_family_changes_the_runtimes(
    outcomes: dict[str, dict[str, float]], family: str
) -> None:
    knee, other = outcomes["knee"], outcomes[family]
    assert other["p99_task_latency_s"] != knee["p99_task_latency_s"]
    assert other["sla_violation_rate"] != knee["sla_violation_rate"]


def test_noisy_power_changes_the_energy_not_the_runtimes(outcomes: dict[str, dict[str, float]]) -> None:
    knee, noisy = outcomes["knee"], outcomes["noisy-power"]
    assert noisy["p99_task_latency_s"] == knee["p99_task_latency_s"]
    assert noisy["mean_power_w"] != pytest.approx(knee["mean_power_w"], rel=1e-3)


def test_simulate_takes_a_physics_family(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    argv = ["simulate", "--preset", "seed-200", "--nodes", "12", "--hours", "0.05", "--schedulers", "default"]
    rc = main([*argv, "--physics-seed", "5", "--physics-family", "pairwise", "--quiet", "--json", str(out)])
    assert rc == 0
    assert '"physics_family": "pairwise"' in out.read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        main([*argv, "--physics-family", "quadratic"])
    assert "--physics-family" in capsys.readouterr().err


def _manager(profile: str) -> tuple[PowerManager, Scheduler]:
    preset = scale_preset(get_preset(EDGE_BATTERY.name), 16)
    sched = Scheduler(profile, preset.federation, seed=1, clock=lambda: 0.0)
    nodes, _ = build_fleet(preset, sched)
    return PowerManager(preset.power_manager, nodes, sched, None, lambda n: None), sched  # type: ignore[arg-type]


def _night(manager: PowerManager) -> None:
    """The same fleet state for every scheduler: battery nodes on battery at assorted charges."""
    for i, node in enumerate(n for n in manager.nodes if n.has_battery):
        node.on_battery = True
        node.battery_wh = node.battery_cap * ((i * 37) % 100) / 100.0


def test_the_power_manager_orders_nodes_alike_for_every_scheduler() -> None:
    aware, aware_sched = _manager("edgeplane")
    fixed, fixed_sched = _manager("edgeplane-fixed")
    assert aware_sched.battery_aware and not fixed_sched.battery_aware
    _night(aware)
    _night(fixed)
    for suspend in (False, True):
        a = [n.name for n in aware.wake_order(aware.nodes, suspend=suspend)]
        f = [n.name for n in fixed.wake_order(fixed.nodes, suspend=suspend)]
        assert a == f
        assert a != [n.name for n in aware.nodes]  # batteries reorder it
    woken = aware.wake_order(aware.nodes)
    on_battery = [n for n in woken if n.on_battery]
    # Mains nodes first, then batteries fullest first; suspends start from the emptiest battery.
    assert woken[: len(woken) - len(on_battery)] == [n for n in aware.nodes if not n.on_battery]
    assert [n.battery_wh for n in on_battery] == sorted((n.battery_wh for n in on_battery), reverse=True)
    assert aware.wake_order(aware.nodes, suspend=True)[0] is on_battery[-1]


def test_without_batteries_on_battery_the_order_is_the_fleet_order() -> None:
    manager, _ = _manager("edgeplane")
    assert manager.wake_order(manager.nodes) == manager.nodes
    assert manager.wake_order(manager.nodes, suspend=True) == manager.nodes
