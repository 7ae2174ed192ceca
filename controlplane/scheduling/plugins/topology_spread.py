"""PodTopologySpread: spread a workload's replicas over hosts and zones (Kubernetes scoring).

Kubernetes' scoring (``podtopologyspread/scoring.go``) with its system default constraints
(hostname maxSkew 3, zone maxSkew 5, both ScheduleAnyway): for each constraint a node scores
``count_in_its_domain * log(domains + 2) + (maxSkew - 1)``, and normalisation maps the lowest
raw score to 100: ``100 * (max + min - s) / max``. Replicas "matching the selector" are the
replicas of the same workload. Topology keys: ``hostname``, ``zone``, ``cluster``, ``region``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import MAX_NODE_SCORE, CycleState, FloatArray, Handle, IntArray
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "PodTopologySpread", "PodTopologySpreadArgs", "new"]

NAME = "PodTopologySpread"
_KEYS = ("hostname", "zone", "cluster", "region")


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    """``default_constraints``: list of {topology_key, max_skew}; Kubernetes' system defaults."""

    default_constraints: tuple[Any, ...] = (
        {"topology_key": "hostname", "max_skew": 3},
        {"topology_key": "zone", "max_skew": 5},
    )


class PodTopologySpread:
    name = NAME

    def __init__(self, args: PodTopologySpreadArgs, handle: Handle) -> None:
        self.handle = handle
        self.constraints: list[tuple[str, int]] = []
        for item in args.default_constraints:
            key = item.get("topology_key")
            skew = item.get("max_skew", 1)
            if key not in _KEYS:
                raise ValueError(f"{NAME}: topology_key must be one of {', '.join(_KEYS)}, got {key!r}")
            if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
                raise ValueError(f"{NAME}: max_skew must be an integer >= 1")
            self.constraints.append((key, skew))

    def _domain(self, key: str) -> IntArray:
        nodes = self.handle.nodes
        if key == "zone":
            return nodes.zone
        if key == "cluster":
            return nodes.cluster
        if key == "region":
            return nodes.region
        return np.arange(len(nodes), dtype=np.int64)

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        placed = self.handle.ledger.workload_rows(request.id)
        if len(placed) == 0:
            # No replica placed yet: every count is zero and every node scores the same.
            return np.full(len(cand), float(sum(skew - 1 for _, skew in self.constraints)))
        raw = np.zeros(len(cand))
        for key, skew in self.constraints:
            domain = self._domain(key)
            counts = np.bincount(domain[placed], minlength=int(domain.max(initial=0)) + 1)
            if key == "hostname":
                size = len(cand)
            else:
                size = len(np.unique(domain[cand.rows]))
            raw += counts[domain[cand.rows]] * math.log(size + 2) + (skew - 1)
        result: FloatArray = np.round(raw)
        return result

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        if len(raw) == 0:
            return raw
        top = float(raw.max())
        low = float(raw.min())
        if top == 0:
            return np.full_like(raw, MAX_NODE_SCORE)
        result: FloatArray = np.floor(MAX_NODE_SCORE * (top + low - raw) / top)
        return result


def new(args: Mapping[str, Any], handle: Handle) -> PodTopologySpread:
    return PodTopologySpread(decode_args(PodTopologySpreadArgs, args, NAME), handle)
