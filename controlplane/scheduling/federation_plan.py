"""The scheduler's side of federation: cluster capacity, the cluster plan, cluster masks.

With two or more federated clusters a workload's replicas are first assigned to clusters
(:func:`controlplane.federation.placement.plan_clusters`, from each cluster's free capacity), then
each replica's cycle runs over its planned cluster's nodes only.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import replace

import numpy as np

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.resources import ResourceRequest

from controlplane.federation.config import FederationConfig
from controlplane.federation.placement import ClusterAggregate, ClusterPlan
from controlplane.federation.plan_arrays import (
    UNKNOWN,
    ClusterColumns,
    FederationColumns,
    federation_columns,
    plan_clusters_columns,
)
from controlplane.scheduling.actions import mig_slots_free
from controlplane.scheduling.framework import BoolArray, FloatArray, IntArray
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


# The summed columns of a cluster's ready rows, as integers so that a sum kept by adding and
# subtracting rows is exact and the same in any order: nodes, CPU in millicores, memory bytes,
# whole GPUs free, MIG compute slices free, DPUs free, CPU capacity in millicores.
_READY, _CPU, _MEM, _GPUS, _MIG, _DPUS, _CAP = range(7)
_CACHE_KEY = "cluster_sums"


def _row_figures(t: NodeTable, rows: IntArray | slice) -> tuple[IntArray, IntArray]:
    """Per row: its columns and the most MIG slices free on one GPU (zero where not ready)."""
    ready = t.ready[rows]
    n = int(ready.shape[0])
    figures = np.zeros((n, 7), dtype=np.int64)
    figures[:, _READY] = 1
    figures[:, _CPU] = np.rint((t.cpu_cap[rows] - t.cpu_alloc[rows]) * 1000.0)
    figures[:, _MEM] = np.rint(t.mem_cap[rows] - t.mem_alloc[rows])
    figures[:, _GPUS] = (t.has_gpu[rows] & ~t.mig_gpu[rows] & ~t.gpu_used[rows]).sum(axis=1)
    free_slices = (7 - t.mig_comp[rows]) * t.mig_gpu[rows]
    figures[:, _MIG] = free_slices.sum(axis=1)
    figures[:, _DPUS] = t.dpu_count[rows] - np.bitwise_count(t.dpu_used[rows])
    figures[:, _CAP] = np.rint(t.cpu_cap[rows] * 1000.0)
    figures[~ready] = 0
    largest = free_slices.max(axis=1) if free_slices.shape[1] else np.zeros(n, dtype=np.int64)
    return figures, np.where(ready, largest, 0).astype(np.int64)


class _ClusterSums:
    """Each cluster's sums, kept from one decision to the next: only the rows that changed since
    the last look (``NodeTable.row_version``) are added again, a few per decision instead of every
    node (``bench/federation_scale.py``). Kept in the table's ``static_cache``, which a node's
    arrival, departure or new facts clear: then it is built afresh."""

    def __init__(self, t: NodeTable) -> None:
        k = len(t.clusters.names)
        self.seen = t.version
        self.figures, self.largest_row = _row_figures(t, slice(None))
        self.sums = np.zeros((k, 7), dtype=np.int64)
        np.add.at(self.sums, t.cluster, self.figures)
        self.largest = np.zeros(k, dtype=np.int64)
        np.maximum.at(self.largest, t.cluster, self.largest_row)
        order = np.argsort(t.cluster, kind="stable")
        bounds = np.searchsorted(t.cluster[order], np.arange(k + 1))
        self.rows_of = [order[bounds[c] : bounds[c + 1]] for c in range(k)]
        region_names = t.regions.names
        self.region = [region_names[int(t.region[r[0]])] if len(r) else "" for r in self.rows_of]

    def refresh(self, t: NodeTable) -> None:
        if t.version == self.seen:
            return
        rows = np.flatnonzero(t.row_version > self.seen)
        self.seen = t.version
        if not len(rows):
            return
        figures, largest = _row_figures(t, rows)
        np.add.at(self.sums, t.cluster[rows], figures - self.figures[rows])
        self.figures[rows] = figures
        self.largest_row[rows] = largest
        for cid in np.unique(t.cluster[rows]):
            self.largest[cid] = self.largest_row[self.rows_of[cid]].max()


def _kept_sums(t: NodeTable) -> _ClusterSums:
    kept = t.static_cache.get(_CACHE_KEY)
    if not isinstance(kept, _ClusterSums):
        kept = t.static_cache[_CACHE_KEY] = _ClusterSums(t)
    else:
        kept.refresh(t)
    return kept


def cluster_aggregates(nodes: NodeTable) -> dict[str, ClusterAggregate]:
    """Free capacity per cluster over ready nodes (the input of cluster-level placement)."""
    t = nodes
    out: dict[str, ClusterAggregate] = {}
    if not len(t):
        return out
    kept = _kept_sums(t)
    sums = kept.sums.tolist()
    largest = kept.largest.tolist()
    for cid, name in enumerate(t.clusters.names):
        row = sums[cid]
        out[name] = ClusterAggregate(
            name=name,
            region=kept.region[cid],
            ready_nodes=row[_READY],
            cpu_free=row[_CPU] / 1000.0,
            memory_free=float(row[_MEM]),
            gpus_free=row[_GPUS],
            mig_compute_free=row[_MIG],
            dpus_free=row[_DPUS],
            cpu_capacity=row[_CAP] / 1000.0,
            mig_largest_free=largest[cid],
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
    *,
    least_quota: tuple[float, float] = (1.0, 1.0),
    explain: bool = True,
) -> ClusterPlan | None:
    """Clusters for ``count`` replicas of ``request``; None when there is nothing to choose from.
    ``least_quota``: the smallest CPU and memory quota bins of the profile's action space (a
    replica may hold that multiple of its request), so that a cluster's room stays an upper bound.
    ``explain``: fill the plan's per-cluster score table (only explanations read it).

    The plan is :func:`~controlplane.federation.placement.plan_clusters`', computed over one
    column per figure (:mod:`~controlplane.federation.plan_arrays`) from the kept cluster sums."""
    if federation is None or len(federation.clusters) < 2:
        return None
    resources = request.resources
    if least_quota != (1.0, 1.0):
        resources = replace(
            resources, cpu=resources.cpu * least_quota[0], memory=int(resources.memory * least_quota[1])
        )
    fed = federation_columns(federation)
    return plan_clusters_columns(
        resources=resources,
        replicas=count,
        federation=federation,
        fed=fed,
        columns=_columns(fed, nodes, request.resources.mig, resources),
        clusters=request.affinity.clusters,
        regions=request.affinity.regions,
        avoid_clusters=request.anti_affinity.clusters,
        avoid_regions=request.anti_affinity.regions,
        unavailable=unavailable,
        origin_region=origin_region(nodes, request),
        scores=explain,
    )


def _columns(
    fed: FederationColumns, nodes: NodeTable, mig: list[str], resources: ResourceRequest
) -> ClusterColumns:
    """Each federated cluster's figures, in the federation's order (a cluster no node has
    joined: none ready)."""
    t = nodes
    names = fed.names
    k = len(t.clusters.names)
    kept_ids = t.static_cache.get("federation_cluster_ids")  # cleared with the table's clusters
    if isinstance(kept_ids, tuple) and kept_ids[0] is fed:
        cid = kept_ids[1]
    else:
        cid = np.array([t.clusters.ids.get(name, k) for name in names], dtype=np.int64)
        t.static_cache["federation_cluster_ids"] = (fed, cid)
    if len(t):
        kept = _kept_sums(t)
        sums = np.vstack([kept.sums, np.zeros((1, 7), dtype=np.int64)])[cid]
        largest = np.append(kept.largest, 0)[cid]
    else:
        sums = np.zeros((len(names), 7), dtype=np.int64)
        largest = np.zeros(len(names), dtype=np.int64)
    unknown = np.full(len(names), UNKNOWN, dtype=np.int64)
    per_node = _node_slots(t, resources)
    hosts = np.append(_mig_hosts(t, mig, per_node), 0)[cid] if mig else unknown
    slots = _replica_slots(t, per_node)
    return ClusterColumns(
        ready_nodes=sums[:, _READY],
        cpu_free=sums[:, _CPU] / 1000.0,
        memory_free=sums[:, _MEM].astype(np.float64),
        gpus_free=sums[:, _GPUS],
        mig_compute_free=sums[:, _MIG],
        dpus_free=sums[:, _DPUS],
        mig_largest_free=largest,
        mig_hosts=hosts,
        replica_slots=np.append(slots, 0)[cid] if slots is not None else unknown,
    )


def _mig_hosts(nodes: NodeTable, profiles: list[str], per_node: FloatArray | None) -> IntArray:
    """Per node-table cluster: its ready nodes' MIG GPUs with a free legal slot for the largest
    of ``profiles`` (the fragmentation the summed compute slices cannot see), each node counted
    at most for the replicas its own free CPU and memory hold (``per_node``, from
    :func:`_node_slots`): a GPU slot on a node without the CPU for the replica is no room, and
    counting it sent MIG requests to clusters whose cycle then found none."""
    t = nodes
    largest = max(profiles, key=lambda p: MIG_SPECS[p].compute)
    k = len(t.clusters.names)
    rows = t.static_cache.get("mig_rows")  # the nodes with a MIG GPU: node facts, kept with them
    if rows is None:
        rows = t.static_cache["mig_rows"] = np.flatnonzero(t.mig_gpu.any(axis=1))
    rows = rows[t.ready[rows]]
    if not len(rows):
        return np.zeros(k, dtype=np.int64)
    can = mig_slots_free(t.mig_gpu[rows], largest, t.mig_occ[rows], t.mig_comp[rows]).any(axis=2).sum(axis=1)
    if per_node is not None:
        can = np.minimum(can, per_node[rows])
    hosts: IntArray = np.bincount(t.cluster[rows], weights=can, minlength=k).astype(np.int64)
    return hosts


def _node_slots(nodes: NodeTable, res: ResourceRequest) -> FloatArray | None:
    """Per node: how many replicas of ``res`` its free CPU and memory hold, counted alone (the
    cycle's fit test, ``ActionSpace.analyse``, node by node); 0 on a node not ready (None: the
    request asks for neither)."""
    if res.cpu <= 0 and res.memory <= 0:
        return None
    t = nodes
    eps = 1e-9
    per_node = np.full(len(t), np.inf)
    if res.cpu > 0:
        per_node = np.minimum(per_node, (t.cpu_cap - t.cpu_alloc + eps) / res.cpu)
    if res.memory > 0:
        per_node = np.minimum(per_node, (t.mem_cap - t.mem_alloc + eps) / res.memory)
    slots: FloatArray = np.floor(np.clip(per_node, 0.0, 1e6)) * t.ready
    return slots


def _replica_slots(nodes: NodeTable, per_node: FloatArray | None) -> IntArray | None:
    """Per node-table cluster: the replicas its ready nodes hold by CPU and memory
    (:func:`_node_slots` summed), so that a cluster whose free CPU and free memory sit on
    different nodes is not planned (None: the request asks for neither)."""
    if per_node is None:
        return None
    k = len(nodes.clusters.names)
    held: IntArray = np.bincount(nodes.cluster, weights=per_node, minlength=k).astype(np.int64)
    return held
