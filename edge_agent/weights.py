"""The objective weights w1..w4 a node uses now: w3 (energy) follows its power source.

The rule is the reward module's (``edgeplane_contract.objective.energy_weight``): on battery
``w3 = w3_base * battery_multiplier * (1 + low_battery_gain * (1 - level/100))``, on mains the
configured ``w3_base``. Configure it with the agent's ``reward:`` block (``weights`` and
``adaptive``, as in a scheduling profile). It is evaluated at every heartbeat, so a change of
power source takes effect within one heartbeat.
"""

from __future__ import annotations

import numpy as np

from edgeplane_contract.objective import RewardConfig, energy_weight

from edge_agent.telemetry.power import PowerState

__all__ = ["current_weights"]


def current_weights(cfg: RewardConfig, power: PowerState) -> tuple[float, float, float, float]:
    """(w1 util, w2 qos, w3 energy, w4 penalty) for this power state."""
    on_battery = np.array([1.0 if power.source == "battery" else 0.0])
    level = np.array([np.nan if power.battery_percent is None else power.battery_percent])
    w3 = float(energy_weight(cfg, on_battery, level)[0])
    return (cfg.weights.util, cfg.weights.qos, round(w3, 6), cfg.weights.penalty)
