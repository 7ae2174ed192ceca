"""The scheduler core asks plugins for capabilities, never for a plugin by name or class."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from edgeplane_contract.objective import AdaptiveWeights, RewardConfig, RewardWeights

from controlplane.scheduling.explanation import CandidateExtras
from controlplane.scheduling.plugins.registry import REGISTRY, register

CORE = Path(__file__).resolve().parents[3] / "controlplane" / "scheduling"


def test_core_modules_import_no_plugin_module():
    # The registry is the one way in: it names plugins so that the core need not.
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "controlplane.scheduling.plugins"
            ):
                assert node.module == "controlplane.scheduling.plugins.registry", (path.name, node.module)


class _Scored:
    """An out-of-tree plugin offering the reward and energy capabilities, and an explanation."""

    name = "TestScored"

    def __init__(self, config: RewardConfig) -> None:
        self.config = config

    def score(self, state, request, cand):
        return np.full(len(cand), 50.0)

    @property
    def reward_config(self) -> RewardConfig:
        return self.config

    @property
    def energy_rule(self) -> RewardConfig:
        return self.config

    def explain_candidate(self, state, k):
        return CandidateExtras(terms={"test": k})


@pytest.fixture
def scored():
    config = RewardConfig(weights=RewardWeights(energy=0.7), adaptive=AdaptiveWeights(True, 2.0, 1.0))
    register("TestScored", lambda args, handle: _Scored(config), replace=True)
    try:
        yield config
    finally:
        REGISTRY.pop("TestScored", None)


def test_an_unknown_plugin_with_the_capabilities_drives_reward_battery_and_explanations(mk, scored):
    sched = mk.scheduler({"name": "t", "plugins": ["NodeReady", "TestScored"]}, [mk.cpu_node("a")])
    assert sched.plugins.reward_config is scored
    assert sched.battery_aware
    assert sched.energy_weights(["nope"]).tolist() == [0.7]
    decision = sched.schedule(mk.request("w"))
    assert decision.explanation.to_dict()["replicas"][0]["chosen"]["test"] == 0


def test_without_a_resource_fit_reporter_the_core_masks_resources_under_the_same_label(mk):
    sched = mk.scheduler({"name": "t", "plugins": ["NodeReady"]}, [mk.cpu_node("a", cpu=4)])
    decision = sched.schedule(mk.request("w", cpu=8), enqueue=False)
    assert not decision.status.ok
    masked = decision.explanation.replicas[0].mask.masked_by
    assert any(key.startswith("NodeResourcesFit: ") for key in masked)
    assert sched.plugins.fit_builtin
    assert not mk.scheduler("default").plugins.fit_builtin
