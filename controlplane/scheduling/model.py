"""The scheduler's data model: nodes, workload requests, assignments and decisions.

These are the types the live hub and the simulator exchange with :class:`~.scheduler.Scheduler`.
All of them are plain dataclasses with ``to_dict`` for JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.explanation import Explanation
from controlplane.scheduling.types import Status

__all__ = [
    "KINDS",
    "PLACEMENT_TERMS",
    "Affinity",
    "AntiAffinity",
    "Assignment",
    "Decision",
    "Feasibility",
    "GpuDevice",
    "MigInstance",
    "MigSlice",
    "Migration",
    "NodeState",
    "PlacementTerms",
    "ReplicaPlacement",
    "Victim",
    "WorkloadRequest",
]

KINDS = ("service", "batch", "analytics", "function")


@dataclass(slots=True)
class MigInstance:
    """A MIG GPU instance that exists on a device (as the agent reports it)."""

    profile: str
    start: int


@dataclass(slots=True)
class GpuDevice:
    """One GPU of a node. In MIG mode the device is only usable through MIG slices."""

    index: int
    model: str = "A100-SXM4-40GB"
    memory_bytes: int = 40 * 2**30
    mig_enabled: bool = False
    # Informational: instances the agent saw. The scheduler runs dynamic MIG (it creates the
    # instance a placement names), so instances no replica claims count as free space.
    mig_instances: list[MigInstance] = field(default_factory=list)


@dataclass(slots=True)
class NodeState:
    """A node as the hub (or the simulator) reports it.

    The ``*_allocated`` fields are the scheduler's own accounting: they are ignored on
    ``upsert_node`` and filled in by ``Scheduler.node()``/``snapshot()``.
    """

    name: str
    cluster: str = "default"
    region: str = "local"
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    cpu: float = 0.0
    memory: int = 0
    gpus: list[GpuDevice] = field(default_factory=list)
    dpus: int = 0
    node_type: str = "cpu"
    power_source: str = "mains"
    battery_percent: float | None = None
    # Bytes units may write on the node; 0: not reported (the scheduler does not count it).
    ephemeral_storage: int = 0
    cpu_allocated: float = 0.0
    memory_allocated: int = 0
    gpus_allocated: list[int] = field(default_factory=list)
    mig_allocated: list[MigSlice] = field(default_factory=list)
    dpus_allocated: list[int] = field(default_factory=list)
    ephemeral_storage_allocated: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "region": self.region,
            "labels": dict(self.labels),
            "ready": self.ready,
            "cpu": self.cpu,
            "memory": self.memory,
            "gpus": [
                {
                    "index": g.index,
                    "model": g.model,
                    "memory_bytes": g.memory_bytes,
                    "mig_enabled": g.mig_enabled,
                    "mig_instances": [{"profile": m.profile, "start": m.start} for m in g.mig_instances],
                }
                for g in self.gpus
            ],
            "dpus": self.dpus,
            "node_type": self.node_type,
            "power_source": self.power_source,
            "battery_percent": self.battery_percent,
            "ephemeral_storage": self.ephemeral_storage,
            "cpu_allocated": self.cpu_allocated,
            "memory_allocated": self.memory_allocated,
            "gpus_allocated": list(self.gpus_allocated),
            "mig_allocated": [m.to_dict() for m in self.mig_allocated],
            "dpus_allocated": list(self.dpus_allocated),
            "ephemeral_storage_allocated": self.ephemeral_storage_allocated,
        }


@dataclass(slots=True)
class Affinity:
    """Hard placement constraints (all given ones must hold) and soft label preferences."""

    clusters: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    node_labels: dict[str, str] = field(default_factory=dict)
    preferred_labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class AntiAffinity:
    """Places a workload must avoid; ``spread_replicas`` forbids two replicas on one node."""

    clusters: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    spread_replicas: bool = False


@dataclass(slots=True, kw_only=True)
class PlacementTerms:
    """What placing a workload depends on, declared once: the user's workload spec (``hub.spec``)
    and the scheduler's request both are these terms plus their own fields."""

    resources: ResourceRequest = field(default_factory=ResourceRequest)
    replicas: int = 1
    priority: int = 0
    affinity: Affinity = field(default_factory=Affinity)
    anti_affinity: AntiAffinity = field(default_factory=AntiAffinity)
    gang: bool = False
    sla_latency_s: float | None = None

    def placement_terms(self) -> dict[str, Any]:
        """These terms as keyword arguments (the objects themselves: the scheduler never mutates
        a request's resources or affinity)."""
        return {name: getattr(self, name) for name in PLACEMENT_TERMS}


PLACEMENT_TERMS = tuple(f.name for f in fields(PlacementTerms))


@dataclass(slots=True)
class WorkloadRequest(PlacementTerms):
    """What the hub asks the scheduler to place: ``replicas`` copies of ``resources``."""

    id: str
    name: str = ""
    kind: str = "service"
    # Where the workload's input data lives: a node name or a region name.
    data_location: str | None = None
    data_bytes: int = 0
    # The runtime the workload expects when it runs alone (used to predict SLA risk).
    expected_runtime_s: float | None = None
    # "PreemptLowerPriority" (may evict lower-priority replicas) or "Never".
    preemption_policy: str = "PreemptLowerPriority"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        if not self.name:
            self.name = self.id


@dataclass(frozen=True, slots=True)
class Feasibility:
    """The nodes a request fits on now (in node-table order), or why none: ``reason``."""

    nodes: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A MIG instance a replica gets: which GPU, which profile, which memory-slice start."""

    gpu: int
    profile: str
    start: int

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "profile": self.profile, "start": self.start}


@dataclass(frozen=True, slots=True)
class Assignment:
    """The resources one replica holds on its node (the action's quotas and devices)."""

    cpu: float
    memory: int
    gpus: tuple[int, ...] = ()
    mig: tuple[MigSlice, ...] = ()
    dpus: tuple[int, ...] = ()
    ephemeral_storage: int = 0  # bytes of the node's storage the replica's work dir may hold

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "gpus": list(self.gpus),
            "mig": [m.to_dict() for m in self.mig],
            "dpus": list(self.dpus),
            "ephemeral_storage": self.ephemeral_storage,
        }

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> Assignment:
        return cls(
            cpu=float(body["cpu"]),
            memory=int(body["memory"]),
            gpus=tuple(int(g) for g in body.get("gpus", ())),
            mig=tuple(
                MigSlice(int(m["gpu"]), str(m["profile"]), int(m["start"])) for m in body.get("mig", ())
            ),
            dpus=tuple(int(d) for d in body.get("dpus", ())),
            # Placements stored before the field held none.
            ephemeral_storage=int(body.get("ephemeral_storage", 0)),
        )


@dataclass(slots=True)
class ReplicaPlacement:
    """Where one replica went, or why it could not go anywhere."""

    replica: int
    node: str | None = None
    cluster: str | None = None
    assignment: Assignment | None = None
    reason: str | None = None

    @property
    def placed(self) -> bool:
        return self.node is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "replica": self.replica,
            "node": self.node,
            "cluster": self.cluster,
            "assignment": self.assignment.to_dict() if self.assignment else None,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Victim:
    """A replica evicted to make room (the caller must stop it and may resubmit it)."""

    workload_id: str
    replica: int
    node: str
    priority: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "replica": self.replica,
            "node": self.node,
            "priority": self.priority,
        }


@dataclass(frozen=True, slots=True)
class Migration:
    """A replica whose MIG instance moves (fragment merge): restart it with ``new``."""

    workload_id: str
    replica: int
    node: str
    old: Assignment
    new: Assignment

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "replica": self.replica,
            "node": self.node,
            "old": self.old.to_dict(),
            "new": self.new.to_dict(),
        }


@dataclass(slots=True)
class Decision:
    """The outcome of one ``schedule`` call."""

    workload_id: str
    status: Status
    placements: list[ReplicaPlacement] = field(default_factory=list)
    victims: list[Victim] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)
    queued: bool = False
    explanation: Explanation = field(default_factory=Explanation)

    @property
    def scheduled(self) -> bool:
        """True when every requested replica has a node."""
        return bool(self.placements) and all(p.placed for p in self.placements)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload_id": self.workload_id,
            "status": self.status.to_dict(),
            "scheduled": self.scheduled,
            "placements": [p.to_dict() for p in self.placements],
            "victims": [v.to_dict() for v in self.victims],
            "migrations": [m.to_dict() for m in self.migrations],
            "queued": self.queued,
            "explanation": self.explanation.to_dict(),
        }
