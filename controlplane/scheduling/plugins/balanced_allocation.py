"""NodeResourcesBalancedAllocation: Kubernetes' balanced-usage score.

For each configured resource the fraction ``requested / allocatable`` (capped at 1) after
placing this replica; score ``(1 - std(fractions)) * 100``, where for two resources
``std = |f1 - f2| / 2`` exactly as upstream. Defaults cpu and memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import MAX_NODE_SCORE, CycleState, FloatArray, Handle
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins._resources import resource_arrays
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "NodeResourcesBalancedAllocation", "NodeResourcesBalancedAllocationArgs", "new"]

NAME = "NodeResourcesBalancedAllocation"


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    """``resources``: which resources to balance (upstream default cpu and memory)."""

    resources: tuple[str, ...] = ("cpu", "memory")


class NodeResourcesBalancedAllocation:
    name = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs, handle: Handle) -> None:
        self.resources = tuple(args.resources)
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        fractions = []
        present = []
        for name in self.resources:
            requested, capacity, _ = resource_arrays(self.handle.nodes, cand, request.resources, name)
            ok = capacity > 0
            fractions.append(np.where(ok, np.minimum(requested / np.where(ok, capacity, 1.0), 1.0), 0.0))
            present.append(ok)
        f = np.array(fractions)
        p = np.array(present, dtype=np.float64)
        count = p.sum(axis=0)
        mean = (f * p).sum(axis=0) / np.maximum(count, 1)
        std = np.sqrt(((f - mean) ** 2 * p).sum(axis=0) / np.maximum(count, 1))
        std = np.where(count <= 1, 0.0, std)
        result: FloatArray = np.floor((1.0 - std) * MAX_NODE_SCORE)
        return result


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation(
        decode_args(NodeResourcesBalancedAllocationArgs, args, NAME), handle
    )
