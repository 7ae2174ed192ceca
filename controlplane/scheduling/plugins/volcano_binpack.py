"""VolcanoBinpack: Volcano's ``binpack`` plugin (``pkg/scheduler/plugins/binpack``).

For each resource the replica requests (request > 0) that has a weight: ``(used + request) *
weight / allocatable``, or 0 if it would exceed allocatable; the sum is divided by the sum of
weights of those resources and scaled to 100. Defaults as upstream: cpu 1, memory 1, no extended
resources (add e.g. ``nvidia.com/gpu: 2`` under ``resources``); ``binpack.weight`` is the
profile weight of this plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import MAX_NODE_SCORE, CycleState, FloatArray, Handle
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins._resources import resource_arrays
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "VolcanoBinpack", "VolcanoBinpackArgs", "new"]

NAME = "VolcanoBinpack"


@dataclass(frozen=True, slots=True)
class VolcanoBinpackArgs:
    """``binpack.cpu``, ``binpack.memory`` and ``binpack.resources.<name>`` weights."""

    cpu: int = 1
    memory: int = 1
    resources: dict[str, int] = field(default_factory=dict)


class VolcanoBinpack:
    name = NAME

    def __init__(self, args: VolcanoBinpackArgs, handle: Handle) -> None:
        self.weights = {"cpu": max(args.cpu, 0), "memory": max(args.memory, 0), **args.resources}
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        score = np.zeros(len(cand))
        weight_sum = 0
        for name, weight in self.weights.items():
            requested_after, capacity, req = resource_arrays(self.handle.nodes, cand, request.resources, name)
            if req == 0:
                continue
            ok = (capacity > 0) & (requested_after <= capacity)
            score += np.where(ok, requested_after * weight / np.where(capacity > 0, capacity, 1.0), 0.0)
            weight_sum += weight
        if weight_sum > 0:
            score /= weight_sum
        result: FloatArray = score * MAX_NODE_SCORE
        return result


def new(args: Mapping[str, Any], handle: Handle) -> VolcanoBinpack:
    return VolcanoBinpack(decode_args(VolcanoBinpackArgs, args, NAME), handle)
