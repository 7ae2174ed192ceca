"""The environment's return: measured outcomes over the episode, weighted once, here.

The value of an outcome reading (``controlplane.sim.engine.Meter``: what the run's report will
say, so far) is

    V = - sla * violations - energy * (kWh + (battery - 1) * battery kWh)
        + served * vCPU-hours served - queue * task-hours waited

and each step's reward is the change of V since the previous decision, so an episode's return
is V at its end minus V at its first decision: the run's outcomes, not the heuristic's
one-step score. Energy is the fleet's in the measured window; a kWh drawn from a battery costs
``battery`` kWh (default: the edgeplane reward's battery multiplier, 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from edgeplane_contract.objective import AdaptiveWeights

__all__ = ["OutcomeWeights", "Outcomes"]


class Outcomes(Protocol):
    """A reading of a run's measured outcomes (the simulator's ``Meter``)."""

    @property
    def sla_violations(self) -> int: ...
    @property
    def energy_j(self) -> float: ...
    @property
    def battery_wh(self) -> float: ...
    @property
    def served_cpu_t(self) -> float: ...
    @property
    def queue_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class OutcomeWeights:
    """The weight of each measured outcome in the return (module docstring)."""

    sla: float = 1.0
    """Per measured task that violated its SLA (finished late, gave up, never finished)."""
    energy: float = 1.0
    """Per kWh the fleet drew in the measured window."""
    battery: float = AdaptiveWeights().battery_multiplier
    """What one kWh drawn from a battery costs, in kWh (1: no battery weighting)."""
    served: float = 0.01
    """Per vCPU-hour of work served in the window (100 vCPU-hours weigh as one violation)."""
    queue: float = 1.0
    """Per hour a measured task waited to start (or gave up waiting)."""

    def __post_init__(self) -> None:
        for name in ("sla", "energy", "battery", "served", "queue"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"OutcomeWeights.{name} must be >= 0")

    def value(self, m: Outcomes) -> float:
        """V of one reading."""
        kwh = m.energy_j / 3.6e6 + (self.battery - 1.0) * m.battery_wh / 1000.0
        return (
            -self.sla * m.sla_violations
            - self.energy * kwh
            + self.served * m.served_cpu_t / 3600.0
            - self.queue * m.queue_s / 3600.0
        )

    def reward(self, before: Outcomes, after: Outcomes) -> float:
        """The reward of the steps between two readings."""
        return self.value(after) - self.value(before)
