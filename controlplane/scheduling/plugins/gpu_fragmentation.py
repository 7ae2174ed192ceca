"""GpuFragmentation: keep large contiguous GPU/MIG blocks free; merge fragments when needed.

Score: minus the placeability a candidate action destroys (its ``frag_loss``: for MIG, the
fragmentation value lost on the chosen GPU, see :mod:`..mig`; for whole GPUs, the loss of the
node's ability to host multi-GPU jobs), plus ``accelerator_reserve`` times the share of an
accelerator node's CPU and memory that work without accelerators would take (so CPU-only work
does not strand GPUs). Normalised as ``100 * (1 - loss)`` (clipped), a fixed scale.

PostFilter (the fragment merge): when a MIG request fits nowhere, look for a node whose MIG
GPUs have enough free slices in total but not in a legal position; re-lay out the movable
instances there (kinds in ``merge_kinds``, priority not above the request's) so the request
fits, with the fewest moves. The moves come back as migrations (the replicas restart with the
new slices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from edgeplane_contract.mig import MIG_SPECS, make_room, occupancy, repack

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleState,
    FloatArray,
    Handle,
    PostFilterResult,
    Status,
    clip,
)
from controlplane.scheduling.model import Migration, MigSlice, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "GpuFragmentation", "GpuFragmentationArgs", "new"]

NAME = "GpuFragmentation"


@dataclass(frozen=True, slots=True)
class GpuFragmentationArgs:
    """Reserve weight for accelerator nodes; whether and what the fragment merge may move."""

    accelerator_reserve: float = 1.0
    merge: bool = True
    merge_kinds: tuple[str, ...] = ("service", "function", "batch", "analytics")
    max_moves: int = 4


class GpuFragmentation:
    name = NAME

    def __init__(self, args: GpuFragmentationArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        nodes = self.handle.nodes
        rows = cand.rows
        loss = cand.frag_loss.copy()
        res = request.resources
        if not (res.gpu or res.mig or res.dpu):
            accel_node = (nodes.gpu_count[rows] > 0) | (nodes.dpu_count[rows] > 0)
            share = (
                cand.cpu / np.maximum(nodes.cpu_cap[rows], 1e-9)
                + cand.memory / np.maximum(nodes.mem_cap[rows], 1.0)
            ) / 2
            loss += np.where(accel_node, self.args.accelerator_reserve * share, 0.0)
        result: FloatArray = -loss
        return result

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        result: FloatArray = MAX_NODE_SCORE * clip(1.0 + raw, 0.0, 1.0)
        return result

    def post_filter(
        self, state: CycleState, request: WorkloadRequest, nodes: NodeTable, unresolvable: BoolArray
    ) -> PostFilterResult:
        res = request.resources
        if not self.args.merge or not res.mig:
            return PostFilterResult(Status.unschedulable("fragment merge: not a MIG request", plugin=NAME))
        need_compute = sum(MIG_SPECS[p].compute for p in res.mig)
        free_compute = ((7 - nodes.mig_comp) * nodes.mig_gpu).sum(axis=1)
        eps = 1e-9
        eligible = (
            ~unresolvable
            & (free_compute >= need_compute)
            & (nodes.cpu_cap - nodes.cpu_alloc + eps >= res.cpu)
            & (nodes.mem_cap - nodes.mem_alloc + eps >= res.memory)
            & (nodes.free_whole_gpus() >= res.gpu)
            & (nodes.dpu_free() >= res.dpu)
        )
        best: tuple[int, int, list[Migration]] | None = None
        for row in np.flatnonzero(eligible):
            plan = self._plan(int(row), request)
            if plan is not None and (best is None or len(plan) < best[0]):
                best = (len(plan), int(row), plan)
        if best is None:
            return PostFilterResult(Status.unschedulable("fragment merge: no layout fits", plugin=NAME))
        return PostFilterResult(Status.success(), node=best[1], migrations=best[2])

    def _plan(self, row: int, request: WorkloadRequest) -> list[Migration] | None:
        nodes = self.handle.nodes
        name = nodes.names[row]
        gpu_indices = [
            nodes.gpu_index(row, c) for c in range(int(nodes.gpu_count[row])) if nodes.mig_gpu[row, c]
        ]
        position = {g: k for k, g in enumerate(gpu_indices)}
        per_gpu: list[list[tuple[object, str, int]]] = [[] for _ in gpu_indices]
        movable: set[object] = set()
        allocs = {}
        for alloc in self.handle.ledger.on_node(name):
            allocs[(alloc.workload_id, alloc.replica)] = alloc
            can_move = alloc.kind in self.args.merge_kinds and alloc.priority <= request.priority
            for k, s in enumerate(alloc.assignment.mig):
                key = (alloc.workload_id, alloc.replica, k)
                per_gpu[position[s.gpu]].append((key, s.profile, s.start))
                if can_move:
                    movable.add(key)
        if not movable:
            return None
        profiles = list(request.resources.mig)
        layout: dict[object, tuple[int, int]]
        if len(profiles) == 1:
            room = make_room(per_gpu, movable, profiles[0])
            if room is None:
                return None
            layout = room[1]
        else:
            fixed = [occupancy((p, st) for key, p, st in insts if key not in movable) for insts in per_gpu]
            items = [(key, p) for insts in per_gpu for key, p, _ in insts if key in movable]
            packed = repack(fixed, items, profiles)
            if packed is None:
                return None
            layout = packed[0]
        new_slices: dict[tuple[str, int], list[MigSlice]] = {}
        for moved, (col, start) in layout.items():
            wid, replica, k = cast(tuple[str, int, int], moved)
            alloc = allocs[(wid, replica)]
            slices = new_slices.setdefault((wid, replica), list(alloc.assignment.mig))
            slices[k] = MigSlice(gpu_indices[col], slices[k].profile, start)
        moves: list[Migration] = []
        for (wid, replica), slices in new_slices.items():
            old = allocs[(wid, replica)].assignment
            if tuple(slices) != old.mig:
                new = replace(old, mig=tuple(slices))
                moves.append(Migration(wid, replica, name, old, new))
        if not moves or len(moves) > self.args.max_moves:
            return None
        return moves


def new(args: Mapping[str, Any], handle: Handle) -> GpuFragmentation:
    return GpuFragmentation(decode_args(GpuFragmentationArgs, args, NAME), handle)
