"""The ledger: every placed replica and its resources, kept in step with the node table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from edgeplane_contract.arrays import IntArray
from edgeplane_contract.objective import IO_HEAVY_KINDS, KIND_SENSITIVITY

from controlplane.scheduling.model import Assignment, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable

__all__ = ["Allocation", "Ledger"]


@dataclass(slots=True)
class Allocation:
    """One placed replica."""

    workload_id: str
    replica: int
    node: str
    assignment: Assignment
    priority: int = 0
    kind: str = "service"
    request: WorkloadRequest | None = None
    seq: int = 0
    # The contention sensitivity this replica was accounted with (set by Ledger.add), so its
    # removal subtracts what its addition added even after the learned estimate moved.
    applied_sensitivity: float | None = None

    @property
    def sensitivity(self) -> float:
        if self.applied_sensitivity is not None:
            return self.applied_sensitivity
        return KIND_SENSITIVITY.get(self.kind, 1.0)

    @property
    def io_heavy(self) -> bool:
        return self.kind in IO_HEAVY_KINDS


class Ledger:
    """Placed replicas by (workload, replica), by node and by workload."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._by_key: dict[tuple[str, int], Allocation] = {}
        self._by_node: dict[str, dict[tuple[str, int], Allocation]] = {}
        self._by_workload: dict[str, dict[int, Allocation]] = {}
        self._seq = 0
        self._priorities: Counter[int] = Counter()
        # Per kind: the sensitivity new replicas are accounted with (the scheduler's interference
        # estimate replaces it when the profile learns; the reward's prior otherwise).
        self.kind_sensitivity: Mapping[str, float] = KIND_SENSITIVITY

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Allocation]:
        return iter(list(self._by_key.values()))

    def min_priority(self) -> int | None:
        """The lowest priority of any placed replica (None when nothing is placed)."""
        return min(self._priorities) if self._priorities else None

    def _forget_priority(self, priority: int) -> None:
        self._priorities[priority] -= 1
        if self._priorities[priority] <= 0:
            del self._priorities[priority]

    def get(self, workload_id: str, replica: int) -> Allocation | None:
        return self._by_key.get((workload_id, replica))

    def of_workload(self, workload_id: str) -> dict[int, Allocation]:
        return dict(self._by_workload.get(workload_id, {}))

    def on_node(self, node: str) -> list[Allocation]:
        return list(self._by_node.get(node, {}).values())

    def workload_rows(self, workload_id: str) -> IntArray:
        """Table rows of the workload's placed replicas (one entry per replica)."""
        allocs = self._by_workload.get(workload_id)
        if not allocs:
            return np.zeros(0, dtype=np.int64)
        index = self.table.index
        return np.array([index[a.node] for a in allocs.values() if a.node in index], dtype=np.int64)

    def add(self, alloc: Allocation) -> None:
        key = (alloc.workload_id, alloc.replica)
        if key in self._by_key:
            raise KeyError(f"replica {alloc.replica} of {alloc.workload_id!r} is already placed")
        self._seq += 1
        alloc.seq = self._seq
        if alloc.applied_sensitivity is None:
            alloc.applied_sensitivity = self.kind_sensitivity.get(alloc.kind, 1.0)
        row = self.table.index[alloc.node]
        self.table.apply(row, alloc.assignment, +1, sensitivity=alloc.sensitivity, io=alloc.io_heavy)
        self._by_key[key] = alloc
        self._by_node.setdefault(alloc.node, {})[key] = alloc
        self._by_workload.setdefault(alloc.workload_id, {})[alloc.replica] = alloc
        self._priorities[alloc.priority] += 1

    def remove(self, workload_id: str, replica: int) -> Allocation | None:
        key = (workload_id, replica)
        alloc = self._by_key.pop(key, None)
        if alloc is None:
            return None
        self._forget_priority(alloc.priority)
        row = self.table.index.get(alloc.node)
        if row is not None:
            self.table.apply(row, alloc.assignment, -1, sensitivity=alloc.sensitivity, io=alloc.io_heavy)
        node_allocs = self._by_node.get(alloc.node)
        if node_allocs is not None:
            node_allocs.pop(key, None)
            if not node_allocs:
                del self._by_node[alloc.node]
        replicas = self._by_workload.get(workload_id)
        if replicas is not None:
            replicas.pop(replica, None)
            if not replicas:
                del self._by_workload[workload_id]
        return alloc

    def move(self, changes: list[tuple[str, int, Assignment]]) -> None:
        """Give replicas new assignments on their nodes (the MIG fragment merge).

        Two phases, all removals before all additions, because moves may swap positions.
        """
        allocs = [self._by_key[(wid, replica)] for wid, replica, _ in changes]
        for alloc in allocs:
            row = self.table.index[alloc.node]
            self.table.apply(row, alloc.assignment, -1, sensitivity=alloc.sensitivity, io=alloc.io_heavy)
        for alloc, (_, _, assignment) in zip(allocs, changes, strict=True):
            alloc.assignment = assignment
            row = self.table.index[alloc.node]
            self.table.apply(row, assignment, +1, sensitivity=alloc.sensitivity, io=alloc.io_heavy)

    def reapply(self, node: str) -> None:
        """Recompute a node's allocation columns from its replicas (after an upsert)."""
        row = self.table.index[node]
        self.table.clear_allocations(row)
        for alloc in self._by_node.get(node, {}).values():
            self.table.apply(row, alloc.assignment, +1, sensitivity=alloc.sensitivity, io=alloc.io_heavy)

    def drop_node(self, node: str) -> list[Allocation]:
        """Forget every replica on a node that is gone; returns them."""
        dropped = list(self._by_node.pop(node, {}).values())
        for alloc in dropped:
            self._by_key.pop((alloc.workload_id, alloc.replica), None)
            self._forget_priority(alloc.priority)
            replicas = self._by_workload.get(alloc.workload_id)
            if replicas is not None:
                replicas.pop(alloc.replica, None)
                if not replicas:
                    del self._by_workload[alloc.workload_id]
        return dropped
