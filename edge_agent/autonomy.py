"""What the agent decides for its work without the hub, with the local policy: how to restart a
placement whose process exited, and, while NATS is down, whether idle function instances stay warm."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter

from edgeplane_contract.messages import OfferSpec

from edge_agent.config import AgentConfig
from edge_agent.executor import RunningPlacement
from edge_agent.functions.pool import FunctionPool, Instance
from edge_agent.hub_link import HubLink
from edge_agent.local_decisions import LocalDecider
from edge_agent.restarts import RestartChoice, as_requested, choice_from_decision, offer_for_restart

__all__ = ["OfflineScaler", "advise_restart"]

log = logging.getLogger("edgeplane.agent")


def advise_restart(decider: LocalDecider, counters: Counter[str], entry: RunningPlacement) -> RestartChoice:
    """How to restart a placement whose back-off is over (the runner asks; hub or no hub).

    With the model loaded, the local policy decides on the replica's offer, this placement's
    own resources counted as free; without it (local_policy off, or the heuristic fallback)
    the process restarts with the requested resources.
    """
    state = entry.state
    if decider.policy is None or not decider.policy.uses_model:
        return as_requested(entry.spec)
    outcome = decider.local_decision(
        purpose="restart",
        request_id=f"restart:{state.placement_id}:{state.restarts + 1}",
        workload_id=state.workload_id,
        offer=offer_for_restart(entry.spec),
        exclude=state.placement_id,
    )
    if outcome is None:
        return as_requested(entry.spec)
    decision, power = outcome.decision, outcome.power
    counters["restart_declines" if decision.decline else "policy_restarts"] += 1
    where = f"on {power.source}"
    if power.source == "battery" and power.battery_percent is not None:
        where += f" at {power.battery_percent:g}%"
    weights = ", ".join(f"{w:g}" for w in outcome.weights)
    context = f"{decision.source}, {where}, weights {weights}, score {decision.score:.2f}"
    return choice_from_decision(decision, entry.spec, context)


def _function_offer(instance: Instance) -> OfferSpec:
    """An idle function instance as an offer: the function's own resources."""
    return OfferSpec(cpu=instance.code.cpu, memory=instance.code.memory, kind="function")


class OfflineScaler:
    """Evicts expired function instances; while the hub is unreachable, scales idle ones down."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        decider: LocalDecider,
        functions: FunctionPool,
        link: HubLink,
        counters: Counter[str],
    ) -> None:
        self.config = config
        self.decider = decider
        self.functions = functions
        self.link = link
        self.counters = counters
        self._last_pass = 0.0

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            try:
                await self.functions.evict_expired()
                if not self.link.connected():
                    await self.scale_pass()
            except Exception:
                log.exception("eviction pass failed")

    async def scale_pass(self) -> int:
        """Without NATS, keep each idle function instance warm only if the local policy would run it.

        Connected, the hub's keep-alive policy decides (keep-alive and pre-warm messages); cut off,
        the agent asks its local policy, every ``offline_scale_interval_s``, about an offer equal to
        each idle instance's resources: a bin keeps it, a decline (e.g. a low battery raising w3)
        stops it. Without a loaded model, nothing changes (the keep-alive still applies).
        Returns how many instances were stopped.
        """
        now = time.monotonic()
        if now - self._last_pass < self.config.offline_scale_interval_s:
            return 0
        self._last_pass = now
        policy = self.decider.policy
        if policy is None or not policy.uses_model:
            return 0
        stopped = 0
        for instance in self.functions.idle_instances():
            if instance.state != "idle":  # became busy while an earlier instance was being stopped
                continue
            outcome = self.decider.local_decision(
                purpose="keep-warm",
                request_id=f"keep-warm:{instance.instance_id}:{uuid.uuid4().hex[:8]}",
                workload_id=f"fn:{instance.code.name}",
                offer=_function_offer(instance),
                released_memory=instance.code.memory,
            )
            if outcome is not None and outcome.decision.decline:
                self.counters["offline_scale_downs"] += 1  # before the stop, which waits for the exit
                await self.functions.stop_instance(
                    instance, "scaled down by the local policy while the hub is unreachable"
                )
                stopped += 1
        return stopped
