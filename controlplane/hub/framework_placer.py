"""The hub's :class:`~controlplane.hub.placement.Placer` on top of the scheduling framework.

Translates the hub's node and workload records into the scheduler's model and back, so the
live hub runs exactly the scheduler the simulator measures (``controlplane.scheduling``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from controlplane.federation.config import FederationConfig
from controlplane.hub.placement import PlacementNode, PlacementOutcome, ReplicaChoice
from controlplane.scheduling.instrument import FrameworkRecorder
from controlplane.scheduling.interference import InterferenceEstimate, LoadProfile
from controlplane.scheduling.model import (
    Assignment,
    Feasibility,
    GpuDevice,
    NodeState,
    WorkloadRequest,
)
from controlplane.scheduling.profiles import FUNCTION_PROFILE, Profile
from controlplane.scheduling.scheduler import Scheduler
from controlplane.scheduling.sla_risk import SlaRiskTable
from controlplane.specs.workload import WorkloadSpec

__all__ = ["FrameworkPlacer"]


class FrameworkPlacer:
    """Placer backed by :class:`Scheduler` with a named (or inline) profile."""

    def __init__(
        self,
        profile: str | dict[str, Any] | Profile = "edgeplane",
        federation: FederationConfig | None = None,
        *,
        recorder: FrameworkRecorder | None = None,
    ) -> None:
        self.scheduler = Scheduler(profile, federation, recorder=recorder)
        # The profile this placer was built with (the hub's ``--scheduler``): a profile promoted
        # over it is kept in the store and used again by a hub started with the same one.
        self.base_profile = self.scheduler.profile
        self.nodes: dict[str, PlacementNode] = {}
        # Moves whenever a placement that failed could now succeed (capacity released, a node's
        # state changed): the hub tries a workload no node fitted again only then.
        self.generation = 0
        # A profile canary's choice of profile per workload (None: the scheduler's own profile
        # for every workload); see controlplane/policies/profile_canary.py.
        # Asked with (workload id, its kind: batch, service, analytics, inference).
        self.profile_for: Callable[[str, str], Profile | None] | None = None

    @property
    def current_profile(self) -> Profile:
        """The profile in force (a profile canary's candidate places only its share)."""
        return self.scheduler.profile

    def _chosen(self, workload_id: str, kind: str = "") -> Profile | None:
        """A profile canary's choice for ``workload_id`` of ``kind`` (None: the profile in force)."""
        return self.profile_for(workload_id, kind) if self.profile_for is not None else None

    def profile_of(self, workload_id: str, kind: str = "") -> str:
        """The name of the profile that places ``workload_id`` now."""
        return (self._chosen(workload_id, kind) or self.scheduler.profile).name

    def use_profile(self, profile: Profile) -> None:
        """Place with ``profile`` from now on (a promoted profile canary)."""
        self.generation += 1  # a workload the old profile found no node for is tried again
        self.scheduler.use_profile(profile)

    def upsert_node(self, node: PlacementNode) -> None:
        self.generation += 1
        self.nodes[node.name] = node
        self.scheduler.upsert_node(self._state(node))

    @staticmethod
    def _state(node: PlacementNode) -> NodeState:
        gpus = [
            GpuDevice(
                index=i,
                memory_bytes=node.gpu_memory_bytes[i] if i < len(node.gpu_memory_bytes) else 40 * 2**30,
            )
            for i in range(node.gpus)
        ]
        node_type = node.node_type if node.node_type in ("cpu", "gpu", "dpu", "edge") else "edge"
        return NodeState(
            name=node.name,
            cluster=node.cluster,
            region=node.region,
            labels=dict(node.labels),
            ready=node.ready,
            cpu=node.cpu,
            memory=node.memory,
            gpus=gpus,
            dpus=node.dpu,
            ephemeral_storage=node.ephemeral_storage,
            node_type=node_type,
            power_source=node.power_source,
            battery_percent=node.battery_percent,
        )

    def set_node_ready(self, name: str, ready: bool) -> None:
        if name in self.nodes:
            self.generation += 1
            self.nodes[name].ready = ready
            self.scheduler.set_node_ready(name, ready)

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.generation += 1
            self.scheduler.remove_node(name)

    def set_node_power(self, name: str, power_source: str, battery_percent: float | None) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        self.generation += 1
        node.power_source = power_source
        node.battery_percent = battery_percent
        self.scheduler.upsert_node(self._state(node))

    def place(self, workload_id: str, spec: WorkloadSpec, replicas: list[int]) -> PlacementOutcome:
        request = spec.request(workload_id)
        decision = self.scheduler.schedule(
            request, replicas=replicas, enqueue=False, profile=self._chosen(workload_id, spec.kind)
        )
        outcome = PlacementOutcome()
        for placement in decision.placements:
            if placement.node is None or placement.assignment is None or placement.replica not in replicas:
                continue
            outcome.choices.append(
                ReplicaChoice(
                    replica=placement.replica,
                    node=placement.node,
                    cluster=placement.cluster or self.nodes[placement.node].cluster,
                    assignment=self._assignment_json(placement.assignment),
                    explanation=decision.explanation.for_replica(placement.replica),
                )
            )
        outcome.victims = [(v.workload_id, v.replica) for v in decision.victims]
        if len(outcome.choices) < len(replicas):
            outcome.unschedulable_reason = decision.status.message() or "no node fits"
        return outcome

    @staticmethod
    def _assignment_json(assignment: Assignment) -> dict[str, Any]:
        data = assignment.to_dict()
        # The agent reads gpu_indices (CUDA_VISIBLE_DEVICES); MIG slices name their parent GPU.
        data["gpu_indices"] = sorted(set(data["gpus"]) | {m["gpu"] for m in data["mig"]})
        return data

    def release(self, workload_id: str, replica: int) -> None:
        self.generation += 1
        self.scheduler.release(workload_id, replica)

    def reserve_existing(
        self, workload_id: str, replica: int, node: str, spec: WorkloadSpec, assignment: dict[str, Any]
    ) -> None:
        if "cpu" in assignment and "memory" in assignment:
            parsed = Assignment.from_dict(assignment)
        else:  # placed by an older placer: rebuild from the request
            parsed = Assignment(
                cpu=spec.resources.cpu,
                memory=spec.resources.memory,
                gpus=tuple(int(i) for i in assignment.get("gpu_indices", [])),
                ephemeral_storage=spec.resources.ephemeral_storage,
            )
        request = spec.request(workload_id)
        self.scheduler.reserve_existing(
            workload_id, replica, node, parsed, priority=spec.priority, kind=request.kind, request=request
        )

    def allocated(self, node: str) -> dict[str, Any]:
        try:
            state = self.scheduler.node(node)
        except KeyError:
            return {}
        return {
            "cpu": round(state.cpu_allocated, 6),
            "memory": state.memory_allocated,
            "gpus": len(state.gpus_allocated),
            "mig": [m.to_dict() for m in state.mig_allocated],
            "dpu": len(state.dpus_allocated),
            "ephemeral_storage": state.ephemeral_storage_allocated,
        }

    def capacity(self, node: str) -> dict[str, Any]:
        known = self.nodes.get(node)
        if known is None:
            return {}
        return {
            "cpu": known.cpu,
            "memory": known.memory,
            "gpus": known.gpus,
            "ephemeral_storage": known.ephemeral_storage,
        }

    def function_nodes(self, request: WorkloadRequest) -> Feasibility:
        return self.scheduler.feasible_nodes(request, FUNCTION_PROFILE)

    def observe_runtime(
        self, kind: str, expected_s: float, observed_s: float, load_seconds: Sequence[float]
    ) -> bool:
        # Either learner takes outcomes: a profile may weigh the SLA-miss risk with its
        # interference fixed (the simulator's Scheduler.observe_runtime feeds both the same way).
        learners = [x for x in (self.scheduler.interference, self.scheduler.sla_risk) if x is not None]
        if not learners:
            return False
        before = sum(len(x) for x in learners)
        # Live agents do not count I/O-heavy neighbours: io_others stays 0 (the I/O penalty
        # keeps its prior here).
        self.scheduler.observe_runtime(kind, expected_s, observed_s, LoadProfile(list(load_seconds)))
        return sum(len(x) for x in learners) > before

    def sla_risk(self, *, use: bool = False) -> SlaRiskTable | None:
        learned = self.scheduler.sla_risk
        if learned is None:
            return None
        table = learned.table()
        if use:
            self.scheduler.use_sla_risk(table)
        return table

    def interference(self, *, use: bool = False) -> InterferenceEstimate | None:
        estimator = self.scheduler.interference
        if estimator is None:
            return None
        estimate = estimator.estimate()
        if use:
            self.scheduler.use_interference(estimate)
        return estimate
