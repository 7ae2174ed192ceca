"""Local restarts of placements whose process exited: the rules, the back-off, the policy's verdict.

Restarts work the way the kubelet restarts containers: the *agent* decides, on its own node, so
they happen the same whether the hub and NATS are reachable or not (reports of the new state
wait in the agent's outbox). The workload's ``restart_policy`` says when a restart is wanted:

* ``never`` (default): the first exit is final (Succeeded on 0, Failed otherwise);
* ``on-failure``: restart after a non-zero exit code;
* ``always``: restart after any exit, 0 included (services).

At most ``max_restarts`` restarts per placement; the one after that exit is final. Between
restarts the agent waits an exponential back-off (:class:`Backoff`: 1 s, 2 s, 4 s, ... capped at
60 s by default). When the back-off is over, the agent's local policy decides *how* to restart
(:func:`choice_from_decision`): a resource bin gives the CPU/memory quota of the new process, a
decline means no restart (the placement ends Failed, with the reason in its message). Without a
loaded model the process restarts with the requested resources (:func:`as_requested`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeplane_contract.messages import RESTART_POLICIES, OfferSpec, RunSpec

if TYPE_CHECKING:
    from edgeplane_contract.policy.runtime import Decision

__all__ = [
    "DEFAULT_MAX_RESTARTS",
    "RESTART_POLICIES",
    "Backoff",
    "RestartChoice",
    "as_requested",
    "choice_from_decision",
    "offer_for_restart",
    "wants_restart",
]

DEFAULT_MAX_RESTARTS = 5


def wants_restart(policy: str, exit_code: int, restarts: int, max_restarts: int) -> bool:
    """Whether a process that exited with ``exit_code`` after ``restarts`` restarts is restarted.

    Unknown policies count as ``never`` (an agent must not restart what it does not understand).
    """
    if restarts >= max_restarts:
        return False
    if policy == "always":
        return True
    if policy == "on-failure":
        return exit_code != 0
    return False


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential back-off between restarts: ``initial_s * 2**restarts``, at most ``max_s``."""

    initial_s: float = 1.0
    max_s: float = 60.0

    def delay(self, restarts: int) -> float:
        """Seconds to wait before restart number ``restarts + 1``."""
        # The exponent is capped so that a huge restart count cannot overflow the float.
        return min(self.max_s, self.initial_s * 2.0 ** min(max(restarts, 0), 62))


@dataclass(frozen=True, slots=True)
class RestartChoice:
    """What to do when the back-off is over: restart with these quotas, or not (``reason`` says why)."""

    restart: bool
    cpu: float
    memory: int
    reason: str


def as_requested(spec: RunSpec) -> RestartChoice:
    """Restart with the requested resources (no local policy loaded)."""
    return RestartChoice(True, spec.cpu, spec.memory, "no local policy model: as requested")


def offer_for_restart(spec: RunSpec) -> OfferSpec:
    """The offer the local policy sees for a restart: the hub's offer for the replica if it sent one.

    Older hubs send no offer; then it is built from the run spec's request.
    """
    if spec.offer is not None:
        return spec.offer
    return OfferSpec(
        cpu=spec.cpu,
        memory=spec.memory,
        gpu=0 if spec.mig else len(spec.gpu_indices),
        mig=list(spec.mig),
        runtime_s=spec.timeout_s,
    )


def choice_from_decision(decision: Decision, spec: RunSpec, context: str) -> RestartChoice:
    """Turn the local policy's decision into a restart choice.

    A bin sets the CPU and memory quota of the restarted process (GPUs keep the placement's
    assignment: the hub reserved them). ``context`` summarises the state the policy saw
    (power, weights) for the message.
    """
    if decision.decline:
        return RestartChoice(False, 0.0, 0, f"restart declined by local policy ({context})")
    memory = max(1, int(decision.memory)) if decision.memory > 0 else spec.memory
    cpu = decision.cpu if decision.cpu > 0 else spec.cpu
    reason = f"local policy bin {decision.action}: cpu {cpu:g}, memory {memory} bytes ({context})"
    return RestartChoice(True, cpu, memory, reason)
