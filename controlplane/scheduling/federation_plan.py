"""The scheduler's side of federation: cluster capacity, the cluster plan, cluster masks.

With two or more federated clusters a workload's replicas are first assigned to clusters
(:func:`controlplane.federation.placement.plan_clusters`, from each cluster's free capacity), then
each replica's cycle runs over its planned cluster's nodes only.
"""

from __future__ import annotations

from collections.abc import Set

import numpy as np

from edgeplane_contract.mig import MIG_SPECS

from controlplane.federation.config import FederationConfig
from controlplane.federation.placement import ClusterAggregate, ClusterPlan, plan_clusters
from controlplane.scheduling.actions import mig_slots_free
from controlplane.scheduling.framework import BoolArray
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable

__all__ = ["cluster_aggregates", "cluster_mask", "cluster_plan", "origin_region"]


def cluster_mask(nodes: NodeTable, cluster: str) -> BoolArray | None:
    """The rows of ``cluster``'s nodes; None when no node of it is known."""
    cid = nodes.clusters.ids.get(cluster)
    if cid is None:
        return None
    mask: BoolArray = nodes.cluster == cid
    return mask


def cluster_aggregates(nodes: NodeTable) -> dict[str, ClusterAggregate]:
    """Free capacity per cluster over ready nodes (the input of cluster-level placement)."""
    t = nodes
    out: dict[str, ClusterAggregate] = {}
    if not len(t):
        return out
    k = len(t.clusters.names)
    ready = t.ready.astype(np.float64)

    def per(values: np.ndarray) -> np.ndarray:
        return np.bincount(t.cluster, weights=values * ready, minlength=k)

    count = per(np.ones(len(t)))
    cpu_free = per(t.cpu_cap - t.cpu_alloc)
    mem_free = per(t.mem_cap - t.mem_alloc)
    gpus = per(t.free_whole_gpus().astype(np.float64))
    free_slices = (7 - t.mig_comp) * t.mig_gpu
    mig = per(free_slices.sum(axis=1).astype(np.float64))
    # The most slices free on one GPU, per cluster (ready nodes): an instance needs them on one.
    largest = np.zeros(k, dtype=np.int64)
    if free_slices.shape[1]:
        np.maximum.at(largest, t.cluster[t.ready], free_slices.max(axis=1)[t.ready])
    dpus = per(t.dpu_free().astype(np.float64))
    cap = per(t.cpu_cap)
    # Each cluster's region: its first row's (one vectorised pass, not a Python loop per node).
    clusters, first = np.unique(t.cluster, return_index=True)
    region_names = t.regions.names
    regions = {int(c): region_names[int(t.region[row])] for c, row in zip(clusters, first, strict=True)}
    for cid, name in enumerate(t.clusters.names):
        out[name] = ClusterAggregate(
            name=name,
            region=regions.get(cid, ""),
            ready_nodes=int(count[cid]),
            cpu_free=float(cpu_free[cid]),
            memory_free=float(mem_free[cid]),
            gpus_free=int(gpus[cid]),
            mig_compute_free=int(mig[cid]),
            dpus_free=int(dpus[cid]),
            cpu_capacity=float(cap[cid]),
            mig_largest_free=int(largest[cid]),
        )
    return out


def origin_region(nodes: NodeTable, request: WorkloadRequest) -> str | None:
    """The region the workload's data comes from: its data node's region, or the location itself."""
    loc = request.data_location
    if loc is None:
        return None
    row = nodes.index.get(loc)
    if row is not None:
        return nodes.states[row].region
    return loc


def cluster_plan(
    federation: FederationConfig | None,
    nodes: NodeTable,
    request: WorkloadRequest,
    count: int,
    unavailable: Set[str],
) -> ClusterPlan | None:
    """Clusters for ``count`` replicas of ``request``; None when there is nothing to choose from."""
    if federation is None or len(federation.clusters) < 2:
        return None
    aggregates = cluster_aggregates(nodes)
    if request.resources.mig:
        _count_mig_hosts(nodes, request.resources.mig, aggregates)
    return plan_clusters(
        resources=request.resources,
        replicas=count,
        federation=federation,
        aggregates=aggregates,
        clusters=request.affinity.clusters,
        regions=request.affinity.regions,
        avoid_clusters=request.anti_affinity.clusters,
        avoid_regions=request.anti_affinity.regions,
        unavailable=unavailable,
        origin_region=origin_region(nodes, request),
    )


def _count_mig_hosts(nodes: NodeTable, profiles: list[str], aggregates: dict[str, ClusterAggregate]) -> None:
    """Set each cluster's ``mig_hosts``: its ready nodes' MIG GPUs with a free legal slot for the
    largest of ``profiles`` (the fragmentation the summed compute slices cannot see)."""
    t = nodes
    largest = max(profiles, key=lambda p: MIG_SPECS[p].compute)
    if t.mig_gpu.shape[1] == 0:
        hosts = np.zeros(len(t.clusters.names), dtype=np.int64)
    else:
        can = mig_slots_free(t.mig_gpu, largest, t.mig_occ, t.mig_comp).any(axis=2).sum(axis=1)
        hosts = np.bincount(t.cluster, weights=can * t.ready, minlength=len(t.clusters.names)).astype(
            np.int64
        )
    for cid, name in enumerate(t.clusters.names):
        aggregate = aggregates.get(name)
        if aggregate is not None:
            aggregate.mig_hosts = int(hosts[cid])
