"""The simulator's physics is hidden: no scheduling module imports or copies it; seeds draw it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from edgeplane_contract.objective import RewardConfig

from controlplane.sim.physics_params import (
    PHYSICS_RANGES,
    REFERENCE_ESTIMATE_ERROR,
    REFERENCE_PHYSICS_SEED,
    draw_physics,
    oracle_profile,
)
from controlplane.sim.presets import PRESETS, SEED_200, ContentionModel

ROOT = Path(__file__).resolve().parents[3]
LEARN = ROOT / "controlplane" / "learn"
TRAINER = ROOT / "controlplane" / "policy"
# Every package the learned policy ships in: the contract (features, runtime, model), the agent
# that bids with it, the scheduler that scores with it, and the learning environment.
SCHEDULER_TREES = [
    ROOT / "controlplane" / "scheduling",
    ROOT / "edgeplane_contract",
    ROOT / "edge_agent",
    LEARN,
]
# The learning environment's world side builds simulator runs, so it imports the simulator: it is
# held to the copy checks and to test_the_environment_reaches_the_physics_only_through_runs.
# The curriculum and the evaluation pick presets for episodes: world side too (where present).
# The field (field.py) runs episodes on the physics seeds of one family: world side too.
WORLD_SIDE = [LEARN / "gym_env.py"] + [
    p for p in (LEARN / "curriculum.py", LEARN / "evaluate.py", LEARN / "field.py") if p.exists()
]
# What the world side may import from the simulator: runs and their outcomes, never the physics.
WORLD_IMPORTS = {
    "controlplane.sim.engine",
    "controlplane.sim.metrics",
    "controlplane.sim.presets",
    "controlplane.sim.runner",
    "controlplane.sim.vmreplay",
    "controlplane.sim.vmtrace",
}
# Beyond those, what one world-side file may take from the physics: the family's *name* a seed
# draws (field.py picks a field's seeds by it), never its parameters.
WORLD_NAMES = {LEARN / "field.py": {"controlplane.sim.physics_params": {"FAMILIES", "draw_family"}}}
# Attributes that hold the hidden physics or its parts (engine, runner, physics modules).
PHYSICS_ATTRIBUTES = {"truth", "physics", "sens", "contention", "power_specs", "network", "estimate_error"}
# The trainer (controlplane/policy) draws nodes and offers from the presets' observable side only:
# what a live scheduler sees (nodes registering, work arriving), through presets.scenario_view.
TRAINER_SIM_NAMES = {"GB", "NodeGroup", "WorkloadClass", "ScenarioView", "scenario_view"}
# ``sens`` there is the reward prior's sum (the agent's feature), not a replica's true sensitivity.
TRAINER_FORBIDDEN = (PHYSICS_ATTRIBUTES - {"sens"}) | {"power_manager"}


def _modules() -> list[Path]:
    files = [p for tree in SCHEDULER_TREES for p in sorted(tree.rglob("*.py")) if p not in WORLD_SIDE]
    assert len(files) > 20
    # The agent's local policy (features, heuristic, runtime) is covered like everything else,
    # and so is the learning environment's observation and return (issue 23).
    assert ROOT / "edgeplane_contract" / "policy" / "features.py" in files
    assert LEARN / "observe.py" in files and LEARN / "reward.py" in files
    assert ROOT / "edge_agent" / "policy" / "cli.py" in files and ROOT / "edge_agent" / "bids.py" in files
    return files


def _trainer() -> list[Path]:
    files = sorted(TRAINER.rglob("*.py"))
    assert TRAINER / "env.py" in files and TRAINER / "train.py" in files
    return files


def _reference_tables() -> list[dict[str, float]]:
    """Every preset's true sensitivity table (the reference physics)."""
    return [dict(p.contention.sensitivity) for p in PRESETS.values()] + [dict(ContentionModel().sensitivity)]


def _literal_table(node: ast.AST) -> dict[str, float] | None:
    """A dict literal ``{"kind": number, ...}`` or tuple of ``("kind", number)`` pairs."""
    pairs: list[tuple[ast.expr | None, ast.expr]] = []
    if isinstance(node, ast.Dict):
        pairs = list(zip(node.keys, node.values, strict=True))
    elif isinstance(node, ast.Tuple | ast.List) and node.elts:
        for elt in node.elts:
            if not (isinstance(elt, ast.Tuple) and len(elt.elts) == 2):
                return None
            pairs.append((elt.elts[0], elt.elts[1]))
    out: dict[str, float] = {}
    for key, value in pairs:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        if not (isinstance(value, ast.Constant) and isinstance(value.value, int | float)):
            return None
        out[key.value] = float(value.value)
    return out or None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_scheduling_module_imports_the_simulator(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        assert not any(n == "controlplane.sim" or n.startswith("controlplane.sim.") for n in names), path


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", WORLD_SIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_environment_reaches_the_physics_only_through_runs(path: Path) -> None:
    """The world side builds runs from seeds and reads their outcomes; the observation it hands
    the policy comes from the scheduler (observe.py, scanned above), never from the physics."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    sim = [n for n in _imports(tree) if n == "controlplane.sim" or n.startswith("controlplane.sim.")]
    allowed = WORLD_NAMES.get(path, {})
    assert sim and set(sim) <= WORLD_IMPORTS | set(allowed), sim
    for module, names in _sim_imports(tree):
        if module in allowed:
            assert names <= allowed[module], (module, names - allowed[module])
    touched = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    touched |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg}
    assert not touched & PHYSICS_ATTRIBUTES, touched & PHYSICS_ATTRIBUTES


@pytest.mark.parametrize("path", _modules() + WORLD_SIDE + _trainer(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_scheduling_module_copies_the_sensitivity_table(path: Path) -> None:
    tables = _reference_tables()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        found = _literal_table(node)
        if found is None or len(found) < 3:
            continue
        for truth in tables:
            shared = set(found) & set(truth)
            if len(shared) >= 3:
                assert any(found[k] != truth[k] for k in shared), f"{path}: {found} is the simulator's table"


def _reference_scalars() -> dict[str, set[float]]:
    """The reference physics' scalar constants, by the name fragment that would hold them."""
    models = [p.contention for p in PRESETS.values()] + [ContentionModel()]
    return {"knee": {m.knee for m in models}, "io_penalty": {m.io_penalty for m in models}}


def _named_numbers(tree: ast.AST) -> list[tuple[str, float]]:
    """Every ``name = number`` (plain or annotated), ``name=number`` keyword and
    ``{"name": number}`` entry, with the name lower-cased."""
    out: list[tuple[str, float]] = []

    def number(node: ast.AST | None) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        return None

    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
            pairs += [(t.attr, node.value) for t in node.targets if isinstance(t, ast.Attribute)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, node.value)]
        elif isinstance(node, ast.keyword) and node.arg:
            pairs = [(node.arg, node.value)]
        elif isinstance(node, ast.Dict):
            pairs = [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        for name, value in pairs:
            found = number(value)
            if found is not None:
                out.append((name.lower(), found))
    return out


@pytest.mark.parametrize("path", _modules() + WORLD_SIDE + _trainer(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_scheduling_module_copies_the_reference_knee_or_io_penalty(path: Path) -> None:
    truth = _reference_scalars()
    for name, value in _named_numbers(ast.parse(path.read_text(encoding="utf-8"))):
        for fragment, values in truth.items():
            if fragment in name:
                assert value not in values, f"{path}: {name} = {value} is the simulator's {fragment}"


def _sim_imports(tree: ast.AST) -> list[tuple[str, set[str]]]:
    """Each import of the simulator: the module and the names taken from it."""
    out: list[tuple[str, set[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, {"*"}) for a in node.names if a.name.startswith("controlplane.sim")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if mod == "controlplane" and any(a.name == "sim" for a in node.names):
                out.append(("controlplane.sim", {"*"}))
            elif mod == "controlplane.sim" or mod.startswith("controlplane.sim."):
                out.append((mod, {a.name for a in node.names}))
    return out


def _estimate_error_copies(tree: ast.AST) -> list[str]:
    """Where the reference estimate error is the spread of a runtime draw (``exp(0.2 * z)``) or
    the value of a name about estimates or their error."""
    hits: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            sides = (node.left, node.right)
            const = any(isinstance(x, ast.Constant) and x.value == REFERENCE_ESTIMATE_ERROR for x in sides)
            normal = any(
                isinstance(c, ast.Attribute) and c.attr in ("standard_normal", "normal", "gauss", "lognormal")
                for x in sides
                for c in ast.walk(x)
            )
            if const and normal:
                hits.append(ast.unparse(node))
    for name, value in _named_numbers(tree):
        if ("estimate" in name or "error" in name) and value == REFERENCE_ESTIMATE_ERROR:
            hits.append(f"{name} = {value}")
    return hits


@pytest.mark.parametrize("path", _trainer(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_trainer_sees_only_what_a_live_scheduler_sees(path: Path) -> None:
    """The trainer reads the presets' observable side (nodes, workload classes) and nothing of the
    physics: no physics module, no physics attribute, no copy of the reference estimate error."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for module, names in _sim_imports(tree):
        assert module == "controlplane.sim.presets", (path, module)
        assert names <= TRAINER_SIM_NAMES, (path, names - TRAINER_SIM_NAMES)
    touched = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    touched |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg}
    assert not touched & TRAINER_FORBIDDEN, (path, touched & TRAINER_FORBIDDEN)
    assert not _estimate_error_copies(tree), (path, _estimate_error_copies(tree))


def test_the_trainer_checks_catch_the_trainers_old_physics() -> None:
    """What controlplane/policy/env.py held before issue 23 is caught by the test above."""
    old = ast.parse(
        "from controlplane.sim.presets import GB, NodeGroup, Preset, WorkloadClass, get_preset\n"
        "expected = runtime * math.exp(0.2 * float(rng.standard_normal()))\n"
        "ESTIMATE_ERROR = 0.2\n"
    )
    ((module, names),) = _sim_imports(old)
    assert module == "controlplane.sim.presets" and names - TRAINER_SIM_NAMES == {"Preset", "get_preset"}
    assert len(_estimate_error_copies(old)) == 2


def test_the_copy_detectors_catch_the_policys_old_constants() -> None:
    """What the policy package held before issue 13's retraining is caught by the tests above."""
    old = ast.parse(
        "KNEE = 0.70\n"
        'TRAINING_SENSITIVITY = {"service": 1.0, "function": 1.0, "analytics": 0.5, "batch": 0.3}\n'
        "cfg = RewardConfig(knee=0.7, io_penalty=0.15)\n"
    )
    tables = [t for node in ast.walk(old) if (t := _literal_table(node)) is not None]
    assert any(t == truth for t in tables for truth in _reference_tables())
    truth = _reference_scalars()
    hits = [(n, v) for n, v in _named_numbers(old) for f, vals in truth.items() if f in n and v in vals]
    assert hits == [("knee", 0.7), ("knee", 0.7), ("io_penalty", 0.15)]


def test_the_local_policy_uses_the_reward_prior() -> None:
    from edgeplane_contract.objective import KIND_SENSITIVITY
    from edgeplane_contract.policy import features

    assert features.KNEE == RewardConfig().knee
    assert dict(features.PRIOR_SENSITIVITY) == KIND_SENSITIVITY


def test_the_reward_prior_is_not_the_reference_physics() -> None:
    cfg = RewardConfig()
    truth = SEED_200.contention
    assert cfg.knee != truth.knee
    assert cfg.io_penalty != truth.io_penalty
    assert dict(cfg.sensitivity) != dict(truth.sensitivity)


def test_the_reference_seed_is_todays_physics() -> None:
    for seed in (None, REFERENCE_PHYSICS_SEED):
        physics = draw_physics(SEED_200, seed)
        assert physics.contention == SEED_200.contention
        assert physics.estimate_error == 0.2
        assert physics.power_specs["cpu"].idle_w == 160.0 and physics.power_specs["cpu"].max_w == 420.0


@pytest.mark.parametrize("seed", [1, 2, 3, 11, 23, 99])
def test_a_physics_seed_draws_within_the_documented_ranges(seed: int) -> None:
    physics = draw_physics(SEED_200, seed)
    assert physics == draw_physics(SEED_200, seed)  # reproducible
    lo, hi = PHYSICS_RANGES["knee"]
    assert lo <= physics.contention.knee <= hi
    for kind, value in physics.contention.sensitivity:
        lo, hi = PHYSICS_RANGES[f"sensitivity.{kind}"]
        assert lo <= value <= hi
    lo, hi = PHYSICS_RANGES["io_penalty"]
    assert lo <= physics.contention.io_penalty <= hi
    lo, hi = PHYSICS_RANGES["estimate_error"]
    assert lo <= physics.estimate_error <= hi
    assert physics.contention != SEED_200.contention


def test_the_oracle_profile_carries_the_truth_and_learns_nothing() -> None:
    physics = draw_physics(SEED_200, 11)
    reward = oracle_profile(physics)["reward"]
    assert reward["interference"] == "fixed"
    assert reward["knee"] == physics.contention.knee
    assert reward["sensitivity"] == physics.sensitivity
