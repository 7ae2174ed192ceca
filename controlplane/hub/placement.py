"""The hub's placement interface and its first implementation (fit filter + least-allocated score).

The hub talks to placement only through :class:`Placer`; the scheduling core
(``controlplane.scheduling``) implements it with the plugin framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from edgeplane_contract.resources import MIG_PROFILES

from controlplane.hub.spec import WorkloadSpec

__all__ = ["FitPlacer", "PlacementNode", "PlacementOutcome", "Placer", "ReplicaChoice"]


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
    explanation: dict[str, Any] = field(default_factory=dict)


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
        """What a node offers: cpu, memory, gpus, dpu."""
        ...


@dataclass(slots=True)
class _Usage:
    cpu: float = 0.0
    memory: int = 0
    gpus: set[int] = field(default_factory=set)
    mig_slices: dict[int, int] = field(default_factory=dict)
    dpu: int = 0


class FitPlacer:
    """Filter by fit and affinity, score by least-allocated (kube-scheduler's default spirit)."""

    def __init__(self) -> None:
        self.nodes: dict[str, PlacementNode] = {}
        self.usage: dict[str, _Usage] = {}
        self.bound: dict[tuple[str, int], tuple[str, float, int, list[int], dict[int, int], int]] = {}

    def upsert_node(self, node: PlacementNode) -> None:
        self.nodes[node.name] = node
        self.usage.setdefault(node.name, _Usage())

    def set_node_ready(self, name: str, ready: bool) -> None:
        if name in self.nodes:
            self.nodes[name].ready = ready

    def allocated(self, node: str) -> dict[str, Any]:
        usage = self.usage.get(node)
        if usage is None:
            return {}
        return {"cpu": round(usage.cpu, 6), "memory": usage.memory, "gpus": len(usage.gpus), "dpu": usage.dpu}

    def capacity(self, node: str) -> dict[str, Any]:
        known = self.nodes.get(node)
        if known is None:
            return {}
        return {"cpu": known.cpu, "memory": known.memory, "gpus": known.gpus, "dpu": known.dpu}

    def set_node_power(self, name: str, power_source: str, battery_percent: float | None) -> None:
        if name in self.nodes:
            self.nodes[name].power_source = power_source
            self.nodes[name].battery_percent = battery_percent

    def _fits(self, node: PlacementNode, spec: WorkloadSpec, usage: _Usage) -> tuple[bool, str]:
        req = spec.resources
        if not node.ready:
            return False, "not ready"
        aff, anti = spec.affinity, spec.anti_affinity
        if aff.clusters and node.cluster not in aff.clusters:
            return False, "cluster affinity"
        if aff.regions and node.region not in aff.regions:
            return False, "region affinity"
        if aff.nodes and node.name not in aff.nodes:
            return False, "node affinity"
        if any(node.labels.get(k) != v for k, v in aff.node_labels.items()):
            return False, "node labels"
        if node.cluster in anti.clusters or node.name in anti.nodes or node.region in anti.regions:
            return False, "anti-affinity"
        if usage.cpu + req.cpu > node.cpu + 1e-9:
            return False, "insufficient cpu"
        if usage.memory + req.memory > node.memory:
            return False, "insufficient memory"
        if req.gpu and node.gpus - len(usage.gpus) < req.gpu:
            return False, "insufficient gpu"
        if req.mig and self._mig_slots(node, usage, req.mig) is None:
            return False, "insufficient MIG slices"
        if usage.dpu + req.dpu > node.dpu:
            return False, "insufficient dpu"
        return True, ""

    @staticmethod
    def _mig_slots(node: PlacementNode, usage: _Usage, profiles: list[str]) -> dict[int, int] | None:
        free = {i: 7 - usage.mig_slices.get(i, 0) for i in range(node.gpus) if i not in usage.gpus}
        taken: dict[int, int] = {}
        for profile in profiles:
            slices = MIG_PROFILES[profile][0]
            for index in sorted(free, key=lambda i: free[i]):  # best fit keeps large blocks free
                if free[index] >= slices:
                    free[index] -= slices
                    taken[index] = taken.get(index, 0) + slices
                    break
            else:
                return None
        return taken

    def _score(self, node: PlacementNode, spec: WorkloadSpec, usage: _Usage) -> float:
        req = spec.resources
        cpu_free = 1 - (usage.cpu + req.cpu) / node.cpu
        mem_free = 1 - (usage.memory + req.memory) / node.memory
        return round(100 * (cpu_free + mem_free) / 2, 3)

    def place(self, workload_id: str, spec: WorkloadSpec, replicas: list[int]) -> PlacementOutcome:
        outcome = PlacementOutcome()
        reasons: dict[str, int] = {}
        for replica in replicas:
            scored: list[tuple[float, str]] = []
            for node in self.nodes.values():
                usage = self.usage[node.name]
                ok, why = self._fits(node, spec, usage)
                if ok:
                    scored.append((self._score(node, spec, usage), node.name))
                else:
                    reasons[why] = reasons.get(why, 0) + 1
            if not scored:
                break
            scored.sort(key=lambda item: (-item[0], item[1]))
            best = self.nodes[scored[0][1]]
            assignment = self._reserve(workload_id, replica, best, spec)
            outcome.choices.append(
                ReplicaChoice(
                    replica=replica,
                    node=best.name,
                    cluster=best.cluster,
                    assignment=assignment,
                    explanation={
                        "placer": "fit",
                        "chosen": {"node": best.name, "score": scored[0][0]},
                        "alternatives": [{"node": n, "score": s} for s, n in scored[1:4]],
                        "filtered": reasons.copy(),
                    },
                )
            )
        if len(outcome.choices) < len(replicas):
            summary = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items())) or "no nodes"
            outcome.unschedulable_reason = f"0/{len(self.nodes)} nodes fit: {summary}"
            if spec.gang:
                for choice in outcome.choices:
                    self.release(workload_id, choice.replica)
                outcome.choices = []
        return outcome

    def _reserve(
        self, workload_id: str, replica: int, node: PlacementNode, spec: WorkloadSpec
    ) -> dict[str, Any]:
        usage = self.usage[node.name]
        req = spec.resources
        free_gpus = [i for i in range(node.gpus) if i not in usage.gpus and not usage.mig_slices.get(i)]
        gpu_indices = free_gpus[: req.gpu]
        mig = self._mig_slots(node, usage, req.mig) if req.mig else {}
        self._apply(workload_id, replica, node.name, req.cpu, req.memory, gpu_indices, mig or {}, req.dpu)
        return {"gpu_indices": gpu_indices, "mig_slices": {str(k): v for k, v in (mig or {}).items()}}

    def _apply(
        self,
        workload_id: str,
        replica: int,
        node: str,
        cpu: float,
        memory: int,
        gpus: list[int],
        mig: dict[int, int],
        dpu: int,
    ) -> None:
        self.release(workload_id, replica)
        usage = self.usage.setdefault(node, _Usage())
        usage.cpu += cpu
        usage.memory += memory
        usage.gpus.update(gpus)
        for index, slices in mig.items():
            usage.mig_slices[index] = usage.mig_slices.get(index, 0) + slices
        usage.dpu += dpu
        self.bound[(workload_id, replica)] = (node, cpu, memory, gpus, mig, dpu)

    def release(self, workload_id: str, replica: int) -> None:
        bound = self.bound.pop((workload_id, replica), None)
        if bound is None:
            return
        node, cpu, memory, gpus, mig, dpu = bound
        usage = self.usage[node]
        usage.cpu = max(0.0, usage.cpu - cpu)
        usage.memory = max(0, usage.memory - memory)
        usage.gpus.difference_update(gpus)
        for index, slices in mig.items():
            usage.mig_slices[index] = max(0, usage.mig_slices.get(index, 0) - slices)
        usage.dpu = max(0, usage.dpu - dpu)

    def reserve_existing(
        self, workload_id: str, replica: int, node: str, spec: WorkloadSpec, assignment: dict[str, Any]
    ) -> None:
        gpus = [int(i) for i in assignment.get("gpu_indices", [])]
        mig = {int(k): int(v) for k, v in (assignment.get("mig_slices") or {}).items()}
        req = spec.resources
        self._apply(workload_id, replica, node, req.cpu, req.memory, gpus, mig, req.dpu)
