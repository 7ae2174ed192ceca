"""NodeResourcesLeastAllocated: Kubernetes' NodeResourcesFit score, LeastAllocated strategy.

Per resource ``(capacity - requested) * 100 / capacity`` (0 if it would not fit), with
``requested`` the node's requests plus this replica's; then the weighted average over the
configured resources (defaults: cpu 1, memory 1, as upstream). Integer arithmetic as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import MAX_NODE_SCORE, CycleState, FloatArray, Handle
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins._resources import weighted_resource_score
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "NodeResourcesLeastAllocated", "NodeResourcesLeastAllocatedArgs", "new"]

NAME = "NodeResourcesLeastAllocated"


@dataclass(frozen=True, slots=True)
class NodeResourcesLeastAllocatedArgs:
    """``resources``: resource name -> weight (upstream default cpu 1, memory 1)."""

    resources: dict[str, int] = field(default_factory=lambda: {"cpu": 1, "memory": 1})


class NodeResourcesLeastAllocated:
    name = NAME

    def __init__(self, args: NodeResourcesLeastAllocatedArgs, handle: Handle) -> None:
        self.resources = dict(args.resources)
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        return weighted_resource_score(
            self.handle.nodes,
            cand,
            request.resources,
            self.resources,
            lambda requested, capacity, safe: np.where(
                requested > capacity, 0.0, np.floor((capacity - requested) * MAX_NODE_SCORE / safe)
            ),
        )


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesLeastAllocated:
    return NodeResourcesLeastAllocated(decode_args(NodeResourcesLeastAllocatedArgs, args, NAME), handle)
