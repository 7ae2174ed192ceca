"""Waiting work: when a queued workload is worth another attempt, and the retry pass itself.

A capacity *epoch* counts the times free capacity grew (a release, a node up, a cluster back);
each node remembers the epoch it last grew at (``NodeTable.freed_at``). A waiting workload is
retried only if a node that grew since its last attempt might hold one of its replicas, or, now
and then, if it could preempt lower-priority work.
"""

from __future__ import annotations

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.framework import BoolArray
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import Decision, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.placement import Placer
from controlplane.scheduling.plugin_set import PluginSet
from controlplane.scheduling.queue import SchedulingQueue

__all__ = ["may_fit", "may_preempt", "request_from_allocation", "retry_pending"]


def may_fit(nodes: NodeTable, res: ResourceRequest, rows: BoolArray | None = None) -> bool:
    """Cheap necessary condition: some (given) ready node has the free CPU, memory, devices."""
    t = nodes
    ok = (
        t.ready & (t.cpu_cap - t.cpu_alloc + 1e-9 >= res.cpu) & (t.mem_cap - t.mem_alloc + 1e-9 >= res.memory)
    )
    if rows is not None:
        ok &= rows
    if res.gpu:
        ok &= t.free_whole_gpus() >= res.gpu
    if res.dpu:
        ok &= t.dpu_free() >= res.dpu
    if res.mig:
        # Node-level total: a fragment merge can gather free slices onto one GPU.
        need = sum(MIG_SPECS[p].compute for p in res.mig)
        ok &= ((7 - t.mig_comp) * t.mig_gpu).sum(axis=1) >= need
    return bool(ok.any())


def may_preempt(ledger: Ledger, plugins: PluginSet, request: WorkloadRequest) -> bool:
    """Whether the profile preempts at all and something placed ranks below ``request``."""
    lowest = ledger.min_priority()
    return (
        bool(plugins.post_filters)
        and request.preemption_policy != "Never"
        and lowest is not None
        and request.priority > lowest
    )


def retry_pending(
    queue: SchedulingQueue,
    placer: Placer,
    *,
    epoch: int,
    now: float,
    preemption_retry_s: float,
    limit: int | None,
    explain: bool,
) -> list[Decision]:
    """One retry pass over ``queue`` (highest priority first) at capacity ``epoch``.

    Returns the decisions that placed at least one replica; the rest keep waiting, marked with
    the epoch of their attempt (or of this pass, when not worth one).
    """
    nodes = placer.nodes
    out: list[Decision] = []
    tried = 0
    for entry in queue.ordered():
        if entry.epoch >= epoch:
            continue
        if limit is not None and tried >= limit:
            break
        grown = nodes.freed_at > entry.epoch
        if not may_fit(nodes, entry.request.resources, grown):
            if not (
                may_preempt(placer.ledger, placer.plugins, entry.request)
                and now - entry.last_attempt_at >= preemption_retry_s
            ):
                entry.epoch = epoch
                continue
        tried += 1
        entry.attempts += 1
        decision = placer.place(entry.request, list(entry.replicas), explain)
        still = [p.replica for p in decision.placements if not p.placed]
        if still:
            entry.replicas = still
            entry.epoch = epoch
            entry.last_reason = decision.status.message()
            entry.last_attempt_at = now
        else:
            queue.remove(entry.request.id)
        if len(still) < len(decision.placements):
            decision.queued = bool(still)
            out.append(decision)
    return out


def request_from_allocation(alloc: Allocation) -> WorkloadRequest:
    """A stand-in request for a replica recorded without one (resources from its assignment)."""
    a = alloc.assignment
    return WorkloadRequest(
        id=alloc.workload_id,
        resources=ResourceRequest(
            cpu=a.cpu, memory=a.memory, gpu=len(a.gpus), mig=[s.profile for s in a.mig], dpu=len(a.dpus)
        ),
        replicas=alloc.replica + 1,
        priority=alloc.priority,
        kind=alloc.kind,
    )
