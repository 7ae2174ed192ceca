"""The hub's placement interface: the hub talks to placement only through :class:`Placer`; the
scheduling framework (``controlplane.scheduling``, through ``hub.framework_placer``) implements it,
the one placement engine of workloads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controlplane.scheduling.explanation import PlacementExplanation
from controlplane.scheduling.interference import InterferenceEstimate
from controlplane.scheduling.model import Feasibility, WorkloadRequest
from controlplane.scheduling.sla_risk import SlaRiskTable
from controlplane.specs.workload import WorkloadSpec

__all__ = ["PlacementNode", "PlacementOutcome", "Placer", "ReplicaChoice"]


@dataclass(slots=True)
class PlacementNode:
    """What placement needs to know about a node."""

    name: str
    cluster: str
    region: str
    cpu: float
    memory: int
    gpus: int = 0
    gpu_memory_bytes: list[int] = field(default_factory=list)
    dpu: int = 0
    ephemeral_storage: int = 0  # bytes; 0: not reported (not counted)
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    node_type: str = "edge"
    power_source: str = "mains"
    battery_percent: float | None = None


@dataclass(slots=True)
class ReplicaChoice:
    replica: int
    node: str
    cluster: str
    assignment: dict[str, Any] = field(default_factory=dict)
    explanation: PlacementExplanation = field(default_factory=PlacementExplanation)


@dataclass(slots=True)
class PlacementOutcome:
    """Choices for the replicas that could be placed, and why the others could not."""

    choices: list[ReplicaChoice] = field(default_factory=list)
    unschedulable_reason: str = ""
    # Lower-priority replicas (workload id, replica) evicted to make room; the hub stops them.
    victims: list[tuple[str, int]] = field(default_factory=list)


class Placer(Protocol):
    """Where the hub's scheduler plugs in. Pure in-memory accounting; no I/O."""

    def upsert_node(self, node: PlacementNode) -> None:
        """Add a node or update its capacity, labels, readiness and power state."""

    def set_node_ready(self, name: str, ready: bool) -> None: ...

    def remove_node(self, name: str) -> None:
        """Forget a node (deleted: its placements already released); unknown names are ignored."""

    def set_node_power(self, name: str, power_source: str, battery_percent: float | None) -> None:
        """Power state changed (mains/battery, battery level): energy-aware scoring reads it."""

    def place(self, workload_id: str, spec: WorkloadSpec, replicas: list[int]) -> PlacementOutcome:
        """Choose nodes for ``replicas`` of a workload and reserve their resources.

        With ``spec.gang`` either every replica is placed or none is.
        """

    def release(self, workload_id: str, replica: int) -> None:
        """Free what a replica's placement reserved (idempotent)."""

    def reserve_existing(
        self, workload_id: str, replica: int, node: str, spec: WorkloadSpec, assignment: dict[str, Any]
    ) -> None:
        """Re-reserve a placement found in the store (hub restart)."""

    def allocated(self, node: str) -> dict[str, Any]:
        """What placements hold on a node (for the API)."""
        ...

    def capacity(self, node: str) -> dict[str, Any]:
        """What a node offers placement (cpu, memory, gpus; empty when unknown), for the metrics."""
        ...

    def function_nodes(self, request: WorkloadRequest) -> Feasibility:
        """The nodes where one instance of a function fits now (the ``functions`` profile's
        filters over the same nodes and reservations as workloads); nothing is reserved."""
        ...

    def observe_runtime(
        self, kind: str, expected_s: float, observed_s: float, load_seconds: Sequence[float]
    ) -> bool:
        """A replica of ``kind`` ran ``observed_s`` against ``expected_s`` alone, its node spending
        ``load_seconds[j]`` in CPU-load bin ``j``: feed the interference estimate and the SLA-risk
        table. True when either took it (False: the profile learns neither, or the observation says
        nothing)."""
        ...

    def interference(self, *, use: bool = False) -> InterferenceEstimate | None:
        """The current interference estimate (None: the profile does not learn); ``use`` also
        makes the scores use it now (after a replay, rather than at the next periodic refit)."""
        ...

    def sla_risk(self, *, use: bool = False) -> SlaRiskTable | None:
        """The SLA-miss risk learned from outcomes (None: the profile does not weigh it); ``use``
        also makes the scores use it now (after a replay)."""
        ...
