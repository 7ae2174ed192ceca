"""NodeAffinity: hard cluster/region/node/label affinity and anti-affinity; soft label preference.

Score (as Kubernetes' NodeAffinity): the number of preferred labels a node matches, normalised
so the best node gets 100.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import (
    MAX_NODE_SCORE,
    BoolArray,
    Code,
    CycleState,
    FloatArray,
    Handle,
    Rejection,
)
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "NodeAffinity", "NodeAffinityArgs", "new"]

NAME = "NodeAffinity"
_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    """No arguments."""


def _in(ids: dict[str, int], names: list[str], column: np.ndarray) -> BoolArray:
    wanted = [ids[n] for n in names if n in ids]
    result: BoolArray = np.isin(column, wanted)
    return result


class NodeAffinity:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> list[Rejection]:
        out: list[Rejection] = []
        aff = request.affinity
        anti = request.anti_affinity
        if aff.clusters:
            out.append(
                Rejection(
                    ~_in(nodes.clusters.ids, aff.clusters, nodes.cluster),
                    "node(s) didn't match cluster affinity",
                    _UNRESOLVABLE,
                )
            )
        if aff.regions:
            out.append(
                Rejection(
                    ~_in(nodes.regions.ids, aff.regions, nodes.region),
                    "node(s) didn't match region affinity",
                    _UNRESOLVABLE,
                )
            )
        if aff.nodes:
            out.append(
                Rejection(~nodes.names_mask(aff.nodes), "node(s) didn't match node affinity", _UNRESOLVABLE)
            )
        for key, value in aff.node_labels.items():
            out.append(
                Rejection(
                    ~nodes.label_mask(key, value),
                    "node(s) didn't match Pod's node affinity/selector",
                    _UNRESOLVABLE,
                )
            )
        if anti.clusters:
            out.append(
                Rejection(
                    _in(nodes.clusters.ids, anti.clusters, nodes.cluster),
                    "node(s) are in an anti-affine cluster",
                    _UNRESOLVABLE,
                )
            )
        if anti.regions:
            out.append(
                Rejection(
                    _in(nodes.regions.ids, anti.regions, nodes.region),
                    "node(s) are in an anti-affine region",
                    _UNRESOLVABLE,
                )
            )
        if anti.nodes:
            out.append(Rejection(nodes.names_mask(anti.nodes), "node(s) are anti-affine", _UNRESOLVABLE))
        if anti.spread_replicas:
            taken = np.zeros(len(nodes), dtype=bool)
            taken[self.handle.ledger.workload_rows(request.id)] = True
            out.append(Rejection(taken, "node(s) already run a replica of this workload", _UNRESOLVABLE))
        return out

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        nodes = self.handle.nodes
        raw = np.zeros(len(cand))
        for key, value in request.affinity.preferred_labels.items():
            raw += nodes.label_mask(key, value)[cand.rows]
        return raw

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        top = raw.max(initial=0.0)
        if top <= 0:
            return np.zeros_like(raw)
        result: FloatArray = np.floor(raw * MAX_NODE_SCORE / top)
        return result


def new(args: Mapping[str, Any], handle: Handle) -> NodeAffinity:
    decode_args(NodeAffinityArgs, args, NAME)
    return NodeAffinity(handle)
