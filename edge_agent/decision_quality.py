"""How good the local policy's decisions are, measured on the node: the **regret** of each
audited decision, the exact reward (``edgeplane_contract.objective``, the objective hub and agent
share) of the best allowed action minus that of the action the policy took, on the state and
offer it decided on, under the weights it used. 0 for a decision the objective would have made
itself; never negative.

The model's own score (``q``) says what the model believes; the regret is what the objective
says of its choice, so a model that is wrong about itself cannot hide it. The mean regret of the
decisions audited since the last heartbeat travels in the heartbeat (``policy_regret``): what
the hub's canary controller compares between nodes running a new version and the others.

An audit computes the reward of every allowed bin (about 2 ms on the 2-core bench machine), after
the bid is answered, and at most one every ``min_interval_s`` (the rest are skipped), so that the
audit neither delays an answer nor takes a core under a burst of bids (5 audits a second: 1% of a core).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["DecisionQuality"]


class DecisionQuality:
    """Audited regret since the last :meth:`take`."""

    def __init__(self, *, min_interval_s: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last = -float("inf")
        self._sum = 0.0
        self._count = 0
        self.audited = 0
        self.skipped = 0

    def audit(
        self, node: Any, offer: Any, weights: tuple[float, float, float, float], action: int
    ) -> float | None:
        """The regret of ``action`` for ``offer`` on ``node`` (None: skipped, too soon after the
        last audit)."""
        now = self.clock()
        if now - self._last < self.min_interval_s:
            self.skipped += 1
            return None
        self._last = now
        from edgeplane_contract.policy.actions import mask_entry
        from edgeplane_contract.policy.heuristic import action_rewards, best_action

        mask, _, _ = mask_entry(node, offer)
        rewards = action_rewards(node, offer, weights, mask)
        taken = float(rewards[action])
        best = float(rewards[best_action(rewards)])
        regret = max(0.0, best - taken) if taken > -float("inf") else best
        self._sum += regret
        self._count += 1
        self.audited += 1
        return regret

    def take(self) -> float | None:
        """The mean regret of the decisions audited since the last call (None: none were)."""
        if not self._count:
            return None
        mean = self._sum / self._count
        self._sum, self._count = 0.0, 0
        return mean
