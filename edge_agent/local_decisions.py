"""One code path for every local-policy decision (bids, restarts, keep-warm): the node view, the
offer in the policy's terms, the live weights, and the decision log."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from edgeplane_contract.messages import OfferSpec

from edge_agent.config import AgentConfig
from edge_agent.decision_quality import DecisionQuality
from edge_agent.decisions import DecisionLog, LoggedDecision
from edge_agent.executor import ProcessRunner
from edge_agent.functions.pool import FunctionPool
from edge_agent.telemetry import GpuReader, PowerReader, SystemReader
from edge_agent.telemetry.power import PowerState
from edge_agent.telemetry.system import RecentSystemReader
from edge_agent.weights import current_weights

__all__ = ["LocalDecider", "LocalOutcome"]

log = logging.getLogger("edgeplane.agent")


@dataclass(frozen=True, slots=True)
class LocalOutcome:
    """One local-policy decision with the inputs it was made under."""

    decision: Any  # edgeplane_contract.policy.runtime.Decision (imported lazily: onnxruntime is optional)
    weights: tuple[float, float, float, float]
    power: PowerState
    node: Any = None  # the NodeView it decided on
    offer: Any = None  # the Offer it decided on


class LocalDecider:
    """The node's local policy (``policy``: a LocalPolicy, None until loaded) and how it is asked."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        system: SystemReader,
        power: PowerReader,
        gpus: GpuReader,
        runner: ProcessRunner,
        functions: FunctionPool,
        decisions: DecisionLog,
        counters: Counter[str],
    ) -> None:
        self.config = config
        # Only the capacity is read of it (the allocations are the runner's, exact): a second old
        # at most, instead of a read per bid.
        self.system = RecentSystemReader(system)
        self.power = power
        self.gpus = gpus
        self.runner = runner
        self.functions = functions
        self.decisions = decisions
        self.counters = counters
        self.reward_config = config.reward
        self.policy: Any = None
        self.policy_version: int | None = None  # the hub's version number; None: shipped
        self.quality = DecisionQuality()  # the regret of its bids (edge_agent/decision_quality.py)

    def node_view(
        self,
        power_source: str,
        battery_percent: float | None,
        *,
        exclude: str | None = None,
        released_memory: int = 0,
    ) -> Any:
        """What the local policy sees of this node now.

        ``exclude`` leaves one placement out of the allocation (the one being restarted: its
        resources are free while it is down); ``released_memory`` is memory about to be freed
        (an idle function instance whose keep-warm is being decided).
        """
        from edgeplane_contract.policy.features import NodeView
        from edgeplane_contract.power import DEFAULT_POWER_SPECS

        sample = self.system.read()
        running = [
            p for pid, p in self.runner.placements.items() if p.state.state == "Running" and pid != exclude
        ]
        gpus = self.gpus.read()
        used_gpus = {i for p in running for i in p.spec.gpu_indices}
        spec = DEFAULT_POWER_SPECS.get(self.config.node_type, DEFAULT_POWER_SPECS["edge"])
        memory_allocated = sum(p.memory for p in running) + self.functions.memory_in_use() - released_memory
        return NodeView(
            node_type=self.config.node_type,
            cpu_capacity=float(self.config.cpu or sample.cpu_count),
            cpu_allocated=sum(p.cpu for p in running),
            memory_capacity=float(self.config.memory or sample.memory_total_bytes),
            memory_allocated=float(max(0, memory_allocated)),
            gpu_count=len(gpus),
            gpus_free=sum(1 for g in gpus if g.index not in used_gpus and not g.mig_enabled),
            replicas=len(running),
            on_battery=power_source == "battery",
            battery_percent=battery_percent,
            idle_w=spec.idle_w,
            max_w=spec.max_w,
        )

    def local_decision(
        self,
        *,
        purpose: str,
        request_id: str,
        workload_id: str,
        offer: OfferSpec,
        replica: int = -1,
        exclude: str | None = None,
        released_memory: int = 0,
    ) -> LocalOutcome | None:
        """Ask the local policy about ``offer`` under the node's live weights; log the decision.

        The weights come from the current power state (w3 rises on battery). Returns the decision
        with its weights and power state, or None when no policy is loaded or it raised (counted
        in ``policy_errors``).
        """
        if self.policy is None:
            return None
        from edgeplane_contract.policy.features import Offer

        power = self.power.read()
        weights = current_weights(self.reward_config, power)
        node = self.node_view(
            power.source, power.battery_percent, exclude=exclude, released_memory=released_memory
        )
        local_offer = Offer.from_request(
            kind=offer.kind,
            cpu=offer.cpu,
            memory=offer.memory,
            gpu=offer.gpu,
            mig=offer.mig,
            sla_s=offer.sla_s,
            runtime_s=offer.runtime_s,
            priority=offer.priority,
        )
        try:
            decision = self.policy.decide(node, local_offer, weights)
        except Exception:  # a policy bug must not take the agent down; the caller falls back
            log.exception("local policy failed on %s %s", purpose, request_id)
            self.counters["policy_errors"] += 1
            return None
        self.decisions.add(
            LoggedDecision(
                t=time.time(),
                request_id=request_id,
                workload_id=workload_id,
                replica=replica,
                state={
                    "cpu_free": node.cpu_capacity - node.cpu_allocated,
                    "memory_free": node.memory_capacity - node.memory_allocated,
                    "on_battery": node.on_battery,
                    "battery_percent": node.battery_percent,
                },
                offer=dataclasses.asdict(offer),
                weights=list(weights),
                action=decision.action,
                decline=decision.decline,
                expected_reward=decision.score,
                source=decision.source,
                purpose=purpose,
            )
        )
        return LocalOutcome(decision, weights, power, node, local_offer)
