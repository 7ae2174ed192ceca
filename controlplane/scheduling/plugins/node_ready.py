"""NodeReady: filters out nodes that are not ready (down, cordoned, asleep)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduling.framework import Code, CycleState, Handle, Rejection
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "NodeReady", "NodeReadyArgs", "new"]

NAME = "NodeReady"


@dataclass(frozen=True, slots=True)
class NodeReadyArgs:
    """No arguments."""


class NodeReady:
    name = NAME

    def filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> list[Rejection]:
        return [Rejection(~nodes.ready, "node(s) were not ready", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)]


def new(args: Mapping[str, Any], handle: Handle) -> NodeReady:
    decode_args(NodeReadyArgs, args, NAME)
    return NodeReady()
