"""Preemption: which lower-priority replicas to evict so that a workload fits.

The algorithm is Kubernetes' DefaultPreemption:

1. On each candidate node, remove every replica of lower priority; if the workload still does not
   fit, the node is out. Otherwise add the removed replicas back, most important first (higher
   priority, then earlier start), keeping each one that leaves the workload fitting
   ("reprieve"). Whatever could not be added back is the node's victim set.
2. Among nodes with a victim set pick, in order: the lowest highest-victim priority, the lowest
   sum of victim priorities, the fewest victims, the latest start of the highest-priority
   victims, the first node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edgeplane_contract.mig import COMPUTE_SLICES, MIG_SPECS, legal_starts
from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.framework import BoolArray
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import Assignment
from controlplane.scheduling.nodetable import NodeTable

__all__ = ["RowResources", "pick_node", "select_victims", "victims_on_node"]

_PRIORITY_OFFSET = 2**31  # as upstream: keeps sums of negative priorities ordered


@dataclass(slots=True)
class RowResources:
    """A mutable copy of one node's free resources, for what-if checks."""

    cpu_free: float
    mem_free: float
    whole_free: set[int]
    mig: dict[int, list[int]] = field(default_factory=dict)  # GPU index -> [occ, compute]
    dpu_free: int = 0
    _gpu_of_col: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, table: NodeTable, row: int) -> RowResources:
        indices = sorted(g.index for g in table.states[row].gpus)
        whole = {
            indices[c]
            for c in range(len(indices))
            if not table.mig_gpu[row, c] and not table.gpu_used[row, c]
        }
        mig = {
            indices[c]: [int(table.mig_occ[row, c]), int(table.mig_comp[row, c])]
            for c in range(len(indices))
            if table.mig_gpu[row, c]
        }
        dpu_free = int(table.dpu_count[row]) - int(table.dpu_used[row]).bit_count()
        return cls(
            cpu_free=float(table.cpu_cap[row] - table.cpu_alloc[row]),
            mem_free=float(table.mem_cap[row] - table.mem_alloc[row]),
            whole_free=whole,
            mig=mig,
            dpu_free=dpu_free,
            _gpu_of_col=indices,
        )

    def release(self, a: Assignment) -> None:
        self.cpu_free += a.cpu
        self.mem_free += a.memory
        self.whole_free.update(a.gpus)
        for s in a.mig:
            spec = MIG_SPECS[s.profile]
            self.mig[s.gpu][0] &= ~spec.mask(s.start)
            self.mig[s.gpu][1] -= spec.compute
        self.dpu_free += len(a.dpus)

    def take(self, a: Assignment) -> None:
        self.cpu_free -= a.cpu
        self.mem_free -= a.memory
        self.whole_free.difference_update(a.gpus)
        for s in a.mig:
            spec = MIG_SPECS[s.profile]
            self.mig[s.gpu][0] |= spec.mask(s.start)
            self.mig[s.gpu][1] += spec.compute
        self.dpu_free -= len(a.dpus)

    def fits(self, res: ResourceRequest) -> bool:
        eps = 1e-9
        if res.cpu > self.cpu_free + eps or res.memory > self.mem_free + eps:
            return False
        if res.gpu > len(self.whole_free) or res.dpu > self.dpu_free:
            return False
        if res.mig:
            # Greedy first-fit, largest first, over copies of the GPUs' state.
            state = {gpu: list(v) for gpu, v in self.mig.items()}
            for profile in sorted(res.mig, key=lambda p: -MIG_SPECS[p].compute):
                spec = MIG_SPECS[profile]
                placed = False
                for gpu in sorted(state):
                    occ, comp = state[gpu]
                    starts = legal_starts(occ, comp, profile)
                    if starts and comp + spec.compute <= COMPUTE_SLICES:
                        state[gpu][0] |= spec.mask(starts[-1])
                        state[gpu][1] += spec.compute
                        placed = True
                        break
                if not placed:
                    return False
        return True


def victims_on_node(
    table: NodeTable, row: int, allocations: Sequence[Allocation], res: ResourceRequest, priority: int
) -> list[Allocation] | None:
    """The minimal victim set on one node (upstream's remove-all-then-reprieve), or None."""
    free = RowResources.of(table, row)
    potential = [a for a in allocations if a.priority < priority]
    if not potential:
        return None
    for alloc in potential:
        free.release(alloc.assignment)
    if not free.fits(res):
        return None
    victims: list[Allocation] = []
    for alloc in sorted(potential, key=lambda a: (-a.priority, a.seq)):
        free.take(alloc.assignment)
        if not free.fits(res):
            free.release(alloc.assignment)
            victims.append(alloc)
    return victims


def pick_node(options: dict[int, list[Allocation]]) -> int | None:
    """Upstream's pickOneNodeForPreemption over {row: victims}."""
    best_key: tuple[int, int, int, int, int] | None = None
    best_row: int | None = None
    for row, victims in options.items():
        top = max(v.priority for v in victims)
        total = sum(v.priority + _PRIORITY_OFFSET for v in victims)
        earliest_top = min(v.seq for v in victims if v.priority == top)
        key = (top, total, len(victims), -earliest_top, row)
        if best_key is None or key < best_key:
            best_key = key
            best_row = row
    return best_row


def select_victims(
    table: NodeTable,
    ledger: Ledger,
    res: ResourceRequest,
    priority: int,
    eligible: BoolArray,
    *,
    max_candidates: int = 100,
) -> tuple[int, list[Allocation]] | None:
    """Pick a node and victims for a workload of ``priority``; None if preemption cannot help."""
    n = len(table)
    freeable_cpu = np.zeros(n)
    freeable_mem = np.zeros(n)
    by_row: dict[int, list[Allocation]] = {}
    rows = np.flatnonzero(eligible)
    if 2 * len(rows) < len(ledger):
        # Far fewer eligible nodes (one cluster of a federation) than placed replicas: walk those
        # nodes' allocations only, not the whole fleet's (a node costs about what two
        # allocations do: the whole-ledger walk stays for a single cluster).
        names = table.names
        for row in rows.tolist():
            allocs = ledger.on_node(names[row])
            if allocs:
                by_row[row] = allocs
    else:
        for alloc in ledger:
            at = table.index.get(alloc.node)
            if at is not None:
                by_row.setdefault(at, []).append(alloc)
    for row, allocs in by_row.items():
        for alloc in allocs:
            if alloc.priority < priority:
                freeable_cpu[row] += alloc.assignment.cpu
                freeable_mem[row] += alloc.assignment.memory
    possible = (
        eligible
        & (freeable_cpu > 0)
        & (table.cpu_cap - table.cpu_alloc + freeable_cpu >= res.cpu - 1e-9)
        & (table.mem_cap - table.mem_alloc + freeable_mem >= res.memory - 1e-9)
    )
    options: dict[int, list[Allocation]] = {}
    for row in np.flatnonzero(possible)[:max_candidates]:
        victims = victims_on_node(table, int(row), by_row.get(int(row), []), res, priority)
        if victims:
            options[int(row)] = victims
    chosen = pick_node(options)
    if chosen is None:
        return None
    return chosen, options[chosen]
