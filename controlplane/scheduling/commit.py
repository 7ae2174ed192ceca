"""Reserve and Bind a cycle's choice in the ledger, and roll a failed gang back.

A chosen node is recorded in the ledger first, then each Reserve plugin claims its own state and
the first Bind plugin that does not skip binds; any refusal unreserves what was reserved, in
reverse, and takes the allocation out again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.scheduling.cycle import Cycle
from controlplane.scheduling.framework import Code, ReservePlugin, Status
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import Assignment, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugin_set import PluginSet

__all__ = ["Undo", "commit", "rollback"]


@dataclass(slots=True)
class Undo:
    """What a ``schedule`` call changed, so a failed gang can be rolled back."""

    placed: list[tuple[str, int]] = field(default_factory=list)
    evicted: list[Allocation] = field(default_factory=list)
    moved: list[list[tuple[str, int, Assignment]]] = field(default_factory=list)


def commit(
    ledger: Ledger, nodes: NodeTable, plugins: PluginSet, request: WorkloadRequest, replica: int, cycle: Cycle
) -> Status:
    """Record the cycle's placement of ``replica``, then Reserve and Bind it (or undo it all)."""
    assert cycle.assignment is not None
    row = cycle.row
    alloc = Allocation(
        workload_id=request.id,
        replica=replica,
        node=nodes.names[row],
        assignment=cycle.assignment,
        priority=request.priority,
        kind=request.kind,
        request=request,
    )
    ledger.add(alloc)
    done: list[ReservePlugin] = []
    for plugin in plugins.reservers:
        status = plugin.reserve(cycle.state, request, replica, row, cycle.assignment)
        if not status.ok:
            for undo in reversed(done):
                undo.unreserve(cycle.state, request, replica, row, cycle.assignment)
            ledger.remove(request.id, replica)
            return status
        done.append(plugin)
    for binder in plugins.binders:
        status = binder.bind(cycle.state, request, replica, row, cycle.assignment)
        if status.code == Code.SKIP:
            continue
        if not status.ok:
            for undo in reversed(done):
                undo.unreserve(cycle.state, request, replica, row, cycle.assignment)
            ledger.remove(request.id, replica)
            return status
        break
    return Status.success()


def rollback(ledger: Ledger, undo: Undo) -> None:
    """Take back the placements and the moves (newest first), then put the evicted back."""
    for wid, replica in reversed(undo.placed):
        ledger.remove(wid, replica)
    for changes in reversed(undo.moved):
        ledger.move(changes)
    for alloc in undo.evicted:
        ledger.add(alloc)
