"""The feature schema: its mirrored constants, MIG room, and what the weights change."""

from __future__ import annotations

import numpy as np
import pytest

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.objective import RewardConfig, RewardWeights
from edgeplane_contract.policy import features as F
from edgeplane_contract.policy.features import (
    FEATURE_NAMES,
    N_FEATURES,
    NodeView,
    Offer,
    features,
    mig_free_from_occupancy,
)
from edgeplane_contract.policy.weights import DEFAULT_WEIGHTS, effective_weights

GB = 1e9


def test_mirrored_constants_match_the_reward_module() -> None:
    cfg = RewardConfig()
    assert F.DEFAULT_RUNTIME_S == dict(cfg.default_runtime_s)
    # The interference model is the reward's prior, taken from the reward module (issue 13).
    assert cfg.knee == F.KNEE
    assert dict(cfg.sensitivity) == dict(F.PRIOR_SENSITIVITY)
    assert F.interference_prior() == {"knee": cfg.knee, "sensitivity": dict(sorted(cfg.sensitivity.items()))}
    assert cfg.battery_floor_percent == F.BATTERY_FLOOR_PERCENT
    w = RewardWeights()
    assert (w.util, w.qos, w.energy, w.penalty) == DEFAULT_WEIGHTS


def test_the_schema_names_every_feature_once() -> None:
    assert len(set(FEATURE_NAMES)) == N_FEATURES == len(FEATURE_NAMES)
    assert [f"node.mig_free.{p}" for p in F.MIG_PROFILE_ORDER] == [
        n for n in FEATURE_NAMES if "mig_free" in n
    ]


def test_mig_room_of_empty_and_partly_used_gpus() -> None:
    assert mig_free_from_occupancy([(0, 0)]) == (7, 3, 2, 1, 1)
    assert mig_free_from_occupancy([(0, 0), (0, 0)]) == (14, 6, 4, 2, 2)
    spec = MIG_SPECS["7g.40gb"]
    assert mig_free_from_occupancy([(spec.mask(0), 7)]) == (0, 0, 0, 0, 0)
    one = MIG_SPECS["1g.5gb"]
    # A 1g.5gb at slice 6 leaves room for 3g.20gb at 0 and 4g.20gb at 0, not at 4.
    assert mig_free_from_occupancy([(one.mask(6), 1)]) == (6, 3, 1, 1, 0)


def test_weights_move_only_the_weight_features() -> None:
    node = NodeView("edge", 8.0, 2.0, 16 * GB, 4 * GB, on_battery=True, battery_percent=30.0)
    offer = Offer(kind="function", cpu=1.0, memory=GB, runtime_s=5.0, sla_s=10.0)
    a = features(node, offer, DEFAULT_WEIGHTS)
    b = features(node, offer, effective_weights(DEFAULT_WEIGHTS, node))
    changed = {FEATURE_NAMES[i] for i in np.flatnonzero(a != b)}
    assert changed == {"w.energy", "w.energy_log", "w.energy_cost"}


def test_effective_weights_raise_w3_on_battery_and_more_as_it_drains() -> None:
    def w3(on_battery: bool, pct: float | None) -> float:
        node = NodeView("edge", 8.0, 0.0, 16 * GB, 0.0, on_battery=on_battery, battery_percent=pct)
        return effective_weights(DEFAULT_WEIGHTS, node)[2]

    assert w3(False, 50.0) == 1.0
    assert w3(True, 100.0) == pytest.approx(4.0)
    assert w3(True, 50.0) == pytest.approx(4.0 * 2.5)
    assert w3(True, 10.0) > w3(True, 50.0)
    node = NodeView("edge", 8.0, 0.0, 16 * GB, 0.0, on_battery=True, battery_percent=10.0)
    assert effective_weights(DEFAULT_WEIGHTS, node, adaptive=False) == DEFAULT_WEIGHTS
