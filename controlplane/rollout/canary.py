"""The canary as a scheduler chooser: a stable share of workloads is placed by the canary
policy, the rest by the profile's own pick, and each workload's outcome is fed to the
:class:`~.controller.CanaryController` under the group that placed it."""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Any

from controlplane.rollout.controller import CanaryController, Group
from controlplane.scheduling.cycle import Choice, Chooser

__all__ = ["OUTCOME_CAP", "CanaryChooser", "latency_vs_sla"]

OUTCOME_CAP = 3.0
"""The worst a sample counts (a dropped workload, or one that took 3x its SLA or more)."""


def latency_vs_sla(latency_s: float | None, sla_s: float | None) -> float | None:
    """A workload's outcome as the controller reads it: its latency over its SLA (1 = on the
    line), capped at :data:`OUTCOME_CAP`; a workload that never finished counts the cap; None
    (not counted) without an SLA."""
    if sla_s is None or sla_s <= 0:
        return None
    if latency_s is None:
        return OUTCOME_CAP
    return min(OUTCOME_CAP, latency_s / sla_s)


class CanaryChooser:
    """Routes each workload's placement to ``canary`` or to the control (``control``, or the
    profile's own pick) by a stable hash of its id against the controller's current share; a
    workload keeps its group for every replica and retry, except that after a rollback
    everything goes to the control."""

    def __init__(
        self, canary: Chooser, controller: CanaryController, *, control: Chooser | None = None
    ) -> None:
        self.canary = canary
        self.control = control
        self.controller = controller
        self._groups: dict[str, Group] = {}
        self.decisions: Counter[str] = Counter()

    def attach(self, sched: Any) -> CanaryChooser:
        """Become ``sched``'s chooser (a canary with an ``attach`` of its own is attached first:
        a learned chooser reads the scheduler's node table)."""
        for part in (self.canary, self.control):
            attach = getattr(part, "attach", None)
            if attach is not None:
                attach(sched)
        sched.chooser = self
        return self

    def group_of(self, workload_id: str) -> Group:
        group = self._groups.get(workload_id)
        if group is None:
            share = zlib.crc32(workload_id.encode()) / 2**32
            group = self._groups[workload_id] = "canary" if share < self.controller.fraction else "control"
        return group

    def __call__(self, choice: Choice) -> int:
        group = self.group_of(choice.request.id)
        if group == "canary" and self.controller.state != "rolled_back":
            self.decisions["canary"] += 1
            return self.canary(choice)
        self.decisions["control"] += 1
        return self.control(choice) if self.control is not None else choice.best

    def outcome(self, workload_id: str, value: float | None, t_s: float) -> None:
        """A workload ended; ``value`` (None: not counted) goes to the controller under its group."""
        group = self._groups.pop(workload_id, None)
        if group is None or value is None:
            return
        self.controller.observe(group, value, t_s)

    def on_resolved(self, workload_id: str, latency_s: float | None, sla_s: float | None, t_s: float) -> None:
        """The simulator's hook (``Simulation.on_resolved``)."""
        self.outcome(workload_id, latency_vs_sla(latency_s, sla_s), t_s)

    def describe(self) -> dict[str, Any]:
        described = {"decisions": dict(self.decisions), **self.controller.describe()}
        inner = getattr(self.canary, "describe", None)
        if inner is not None:
            described["canary"] = inner()
        return described
