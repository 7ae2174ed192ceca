"""DefaultPreemption: the PostFilter that evicts lower-priority replicas (Kubernetes' algorithm).

See :mod:`controlplane.scheduling.preemption` for victim selection and node choice. Requests
with ``preemption_policy: Never`` never preempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduling.framework import BoolArray, CycleState, Handle, PostFilterResult, Status
from controlplane.scheduling.model import Victim, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.args import decode_args
from controlplane.scheduling.preemption import select_victims

__all__ = ["NAME", "DefaultPreemption", "DefaultPreemptionArgs", "new"]

NAME = "DefaultPreemption"


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    """``max_candidates``: nodes examined in detail (upstream: at least 100)."""

    max_candidates: int = 100


class DefaultPreemption:
    name = NAME

    def __init__(self, args: DefaultPreemptionArgs, handle: Handle) -> None:
        self.handle = handle
        self.max_candidates = args.max_candidates

    def post_filter(
        self, state: CycleState, request: WorkloadRequest, nodes: NodeTable, unresolvable: BoolArray
    ) -> PostFilterResult:
        if request.preemption_policy == "Never":
            return PostFilterResult(Status.unschedulable("preemption disabled by the workload", plugin=NAME))
        found = select_victims(
            nodes,
            self.handle.ledger,
            request.resources,
            request.priority,
            ~unresolvable,
            max_candidates=self.max_candidates,
        )
        if found is None:
            return PostFilterResult(Status.unschedulable("preemption: no node would fit", plugin=NAME))
        row, victims = found
        return PostFilterResult(
            Status.success(),
            node=row,
            victims=[Victim(v.workload_id, v.replica, v.node, v.priority) for v in victims],
        )


def new(args: Mapping[str, Any], handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(decode_args(DefaultPreemptionArgs, args, NAME), handle)
