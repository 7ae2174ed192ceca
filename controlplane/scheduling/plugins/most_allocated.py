"""NodeResourcesMostAllocated: Kubernetes' NodeResourcesFit score, MostAllocated strategy.

Per resource ``requested * 100 / capacity`` (requested capped at capacity), weighted average over
the configured resources (defaults cpu 1, memory 1). Favours the fullest nodes.
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

__all__ = ["NAME", "NodeResourcesMostAllocated", "NodeResourcesMostAllocatedArgs", "new"]

NAME = "NodeResourcesMostAllocated"


@dataclass(frozen=True, slots=True)
class NodeResourcesMostAllocatedArgs:
    """``resources``: resource name -> weight (upstream default cpu 1, memory 1)."""

    resources: dict[str, int] = field(default_factory=lambda: {"cpu": 1, "memory": 1})


class NodeResourcesMostAllocated:
    name = NAME

    def __init__(self, args: NodeResourcesMostAllocatedArgs, handle: Handle) -> None:
        self.resources = dict(args.resources)
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        return weighted_resource_score(
            self.handle.nodes,
            cand,
            request.resources,
            self.resources,
            lambda requested, capacity, safe: np.floor(
                np.minimum(requested, capacity) * MAX_NODE_SCORE / safe
            ),
        )


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesMostAllocated:
    return NodeResourcesMostAllocated(decode_args(NodeResourcesMostAllocatedArgs, args, NAME), handle)
