"""The objective weights the policy is conditioned on, with w3 adapted to live power telemetry.

The rule is the reward module's (:func:`edgeplane_contract.objective.energy_weight`): on
battery ``w3 * battery_multiplier * (1 + low_battery_gain * (1 - battery_percent / 100))``,
otherwise ``w3``. The agent applies it to its profile's base weights before every decision, so
one model serves every weighting and the battery rule stays configuration, not training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgeplane_contract.policy.features import NodeView

__all__ = ["DEFAULT_WEIGHTS", "Weights", "effective_weights", "validate_weights"]

Weights = tuple[float, float, float, float]

# The reward's defaults (RewardWeights()): util, qos, energy, penalty.
DEFAULT_WEIGHTS: Weights = (1.0, 2.0, 1.0, 4.0)


def validate_weights(weights: Sequence[float]) -> Weights:
    """The weights as a 4-tuple of floats; ValueError unless four finite values >= 0."""
    if len(weights) != 4:
        raise ValueError(f"expected 4 weights (w1..w4), got {len(weights)}")
    w1, w2, w3, w4 = (float(w) for w in weights)
    for name, value in (("w1", w1), ("w2", w2), ("w3", w3), ("w4", w4)):
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return (w1, w2, w3, w4)


def effective_weights(
    base: Sequence[float],
    node: NodeView,
    *,
    battery_multiplier: float = 4.0,
    low_battery_gain: float = 3.0,
    adaptive: bool = True,
) -> Weights:
    """``base`` w1..w4 with w3 raised for a node on battery (the reward module's rule)."""
    from edgeplane_contract.objective import AdaptiveWeights, RewardConfig, RewardWeights, energy_weight

    w1, w2, w3, w4 = validate_weights(base)
    cfg = RewardConfig(
        weights=RewardWeights(util=w1, qos=w2, energy=w3, penalty=w4),
        adaptive=AdaptiveWeights(adaptive, battery_multiplier, low_battery_gain),
    )
    pct = np.nan if node.battery_percent is None else node.battery_percent
    w3_eff = energy_weight(
        cfg, np.array([1.0 if node.on_battery else 0.0]), np.array([pct], dtype=np.float64)
    )
    return (w1, w2, float(w3_eff[0]), w4)
