"""What a live canary keeps, whatever it rolls out (a model version to nodes, a scheduling profile
to new workloads): its clock, the controller and the pooled outcome guard, what it has acted on,
and its resumption from the store. The two live canaries (``policies/canary_live.py``,
``policies/profile_canary.py``) add their signals and what each decision does."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from controlplane.rollout.controller import (
    CanaryController,
    RolloutConfig,
    RolloutEvent,
    guard,
    judge,
)

__all__ = ["LiveRollout"]


class LiveRollout(ABC):
    """A canary on the hub's clock: subclasses name their guards and act on each decision
    (:meth:`_act`)."""

    def __init__(
        self, config: RolloutConfig, *, wake: Callable[[], None], by: str, clock: Callable[[], float]
    ) -> None:
        self.wake = wake
        self.by = by
        self.clock = clock
        self.started = clock()
        self.started_at = time.time()
        self.controller = CanaryController(config, start_s=0.0)
        # The outcome guard: the same rules over each placement's latency against its workload's
        # SLA (a failure counts the cap), by group; it never steps or promotes, its rollback is
        # the canary's, its reason named by the guard.
        self.outcomes = guard(config)
        self.acted = 0  # controller events already acted on
        # What has been done (the controller decides first; the store and the rest follow).
        self.state = "canary"
        self.fraction = 0.0
        self.failure = ""

    def _t(self) -> float:
        return self.clock() - self.started

    @abstractmethod
    async def _act(self, kind: str, fraction: float, reason: str, data: dict[str, Any]) -> None:
        """Carry out one controller decision (``step``, ``promote``, ``rollback``)."""

    async def _decide(self, guards: Sequence[tuple[CanaryController, str]], t: float) -> None:
        """The controller and ``guards`` judge at ``t``; each decision since the last is acted on."""
        judge(self.controller, guards, t)
        events = self.controller.events
        while self.acted < len(events):
            event = events[self.acted]
            await self._act(event.kind, event.fraction, event.reason, event.to_dict())
            # Only once done (a failed act is done again at the next tick), and together, so that
            # a reader never sees a state without the event that led to it.
            self.acted += 1
            self.state = {"promote": "promoted", "rollback": "rolled_back"}.get(event.kind, "canary")
            self.fraction = event.fraction

    def _resume(
        self,
        config: RolloutConfig,
        *,
        started_at: float,
        step: int,
        fraction: float,
        events: list[dict[str, Any]],
    ) -> bool:
        """Kept in the store, going on: the clock counting from the first start, and, when it had
        acted (``events``), the controller at ``step`` with its timeline, windows empty and the
        step's dwell started again. False when it had not acted yet (its hub stopped before its
        first share: it starts now)."""
        self.started = self.clock() - max(0.0, time.time() - started_at)
        self.started_at = started_at
        kept = [RolloutEvent(**e) for e in events]
        if not kept:
            return False
        self.controller = CanaryController.resume(config, step=step, events=kept, t_s=self._t())
        self.acted = len(kept)
        self.fraction = fraction
        return True
