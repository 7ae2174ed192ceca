"""Per-resource (requested after placement, capacity, pod request) arrays for scoring plugins.

Resource names follow Kubernetes: ``cpu``, ``memory``, ``nvidia.com/gpu`` (whole GPUs) and
``edgeplane.io/dpu``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import FloatArray
from controlplane.scheduling.nodetable import NodeTable

__all__ = ["RESOURCE_NAMES", "resource_arrays", "weighted_resource_score"]

RESOURCE_NAMES = ("cpu", "memory", "nvidia.com/gpu", "edgeplane.io/dpu")


def resource_arrays(
    nodes: NodeTable, cand: Candidates, res: ResourceRequest, name: str
) -> tuple[FloatArray, FloatArray, float]:
    """(node's requested amount including this replica, node capacity, this replica's request)."""
    rows = cand.rows
    if name == "cpu":
        return nodes.cpu_alloc[rows] + cand.cpu, nodes.cpu_cap[rows], res.cpu
    if name == "memory":
        return nodes.mem_alloc[rows] + cand.memory, nodes.mem_cap[rows], float(res.memory)
    if name == "nvidia.com/gpu":
        whole = nodes.has_gpu[rows] & ~nodes.mig_gpu[rows]
        used = (whole & nodes.gpu_used[rows]).sum(axis=1).astype(np.float64)
        return used + res.gpu, whole.sum(axis=1).astype(np.float64), float(res.gpu)
    if name == "edgeplane.io/dpu":
        used = np.bitwise_count(nodes.dpu_used[rows]).astype(np.float64)
        return used + res.dpu, nodes.dpu_count[rows].astype(np.float64), float(res.dpu)
    raise ValueError(f"unknown resource {name!r} (known: {', '.join(RESOURCE_NAMES)})")


def weighted_resource_score(
    nodes: NodeTable,
    cand: Candidates,
    res: ResourceRequest,
    weights_by_resource: Mapping[str, int],
    per_resource: Callable[[FloatArray, FloatArray, FloatArray], FloatArray],
) -> FloatArray:
    """Upstream's resource-allocation scorer: ``per_resource(requested, capacity, safe_capacity)``
    for each configured resource a node has, then the weighted average, floored (integer
    arithmetic as upstream); nodes with none of the resources score 0."""
    total = np.zeros(len(cand))
    weights = np.zeros(len(cand))
    for name, weight in weights_by_resource.items():
        requested, capacity, _ = resource_arrays(nodes, cand, res, name)
        present = capacity > 0
        safe = np.where(present, capacity, 1.0)
        total += np.where(present, per_resource(requested, capacity, safe) * weight, 0.0)
        weights += np.where(present, weight, 0)
    result: FloatArray = np.where(weights > 0, np.floor(total / np.maximum(weights, 1)), 0.0)
    return result
