"""The router's energy weight w3: remembered per power state, always the adaptive rule's value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from edgeplane_contract.objective import AdaptiveWeights, RewardConfig, energy_weight

from controlplane.serverless.router import EnergyWeights

STATES = [("mains", None), ("battery", None), ("battery", 80.0), ("battery", 5.0), ("mains", 50.0)]


def _rule(reward: RewardConfig, scale: float, power_source: str, battery: float | None) -> float:
    on_battery = np.array([1.0 if power_source == "battery" else 0.0])
    level = np.array([np.nan if battery is None else battery])
    return scale * float(energy_weight(reward, on_battery, level)[0])


@pytest.mark.parametrize(("power_source", "battery"), STATES)
def test_w3_asked_again_is_the_adaptive_rules_value(power_source: str, battery: float | None) -> None:
    weights = EnergyWeights()
    first = weights.w3(power_source, battery)
    assert (
        first
        == weights.w3(power_source, battery)
        == _rule(weights.reward, weights.scale, power_source, battery)
    )


def test_w3_follows_a_replaced_reward_config_and_scale() -> None:
    weights = EnergyWeights()
    on_battery = weights.w3("battery", 20.0)
    weights.reward = dataclasses.replace(weights.reward, adaptive=AdaptiveWeights(enabled=False))
    assert weights.w3("battery", 20.0) == _rule(weights.reward, weights.scale, "battery", 20.0) < on_battery
    weights.scale = 0.5
    assert weights.w3("battery", 20.0) == _rule(weights.reward, 0.5, "battery", 20.0)


def test_many_battery_levels_stay_exact_past_the_memos_bound() -> None:
    weights = EnergyWeights()
    for level in np.linspace(0, 100, 3000):
        assert weights.w3("battery", float(level)) == _rule(
            weights.reward, weights.scale, "battery", float(level)
        )
