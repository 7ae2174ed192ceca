"""The agent's local decisions: answering the hub's bids with the local policy, and a bounded log.

The same policy also decides without the hub (``purpose`` in the log): how to restart a
placement whose process exited (``restart``) and, while NATS is down, whether to keep an idle
function instance warm (``keep-warm``). Those entries carry ``replica = -1`` (the agent does not
know replica numbers) and ``workload_id`` = the workload, or ``fn:<function>``.

Each bid asks what the node's policy would do with one replica: decline (offload) or run it with
one of the 64 resource bins. The answer carries the policy's expected reward under the node's own
weights (w3 follows the power source), which the hub compares with its own estimate for nodes
that do not answer in time.

The log keeps the last ``limit`` decisions (state summary, offer, weights, action and its reward:
the reward is a one-step function of state and action, so it is known when the decision is
made). Rewards leave the node only through
:meth:`DecisionLog.export`, perturbed with Laplace noise of scale ``sensitivity / epsilon``
(local differential privacy; epsilon 0.1 by default, rewards clipped to [-1, 1] so the
sensitivity is 2).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DecisionLog", "LoggedDecision", "laplace"]

REWARD_CLIP = 1.0


@dataclass(slots=True)
class LoggedDecision:
    t: float
    request_id: str
    workload_id: str
    replica: int
    state: dict[str, Any]
    offer: dict[str, Any]
    weights: list[float]
    action: int
    decline: bool
    expected_reward: float
    source: str
    purpose: str = "bid"  # bid | restart | keep-warm


def laplace(scale: float, rng: random.Random) -> float:
    """One Laplace(0, scale) sample by inverse CDF."""
    u = rng.random() - 0.5
    return -scale * math.copysign(1.0, u) * math.log(1 - 2 * abs(u))


class DecisionLog:
    """Bounded, in memory; oldest entries go first."""

    def __init__(self, *, limit: int = 10_000, epsilon: float = 0.1, seed: int | None = None) -> None:
        if epsilon <= 0:
            raise ValueError("epsilon must be > 0")
        self.entries: deque[LoggedDecision] = deque(maxlen=limit)
        self.epsilon = epsilon
        self._rng = random.Random(seed)

    def add(self, entry: LoggedDecision) -> None:
        self.entries.append(entry)

    def export(self, *, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest entries for retraining, every reward clipped and Laplace-noised."""
        scale = 2 * REWARD_CLIP / self.epsilon
        out = []
        for entry in list(self.entries)[-limit:]:
            item = asdict(entry)
            clipped = max(-REWARD_CLIP, min(REWARD_CLIP, float(item["expected_reward"])))
            item["expected_reward"] = clipped + laplace(scale, self._rng)
            out.append(item)
        return out
