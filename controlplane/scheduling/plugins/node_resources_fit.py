"""NodeResourcesFit: the resource part of the action mask (CPU, memory, GPUs, MIG slices, DPUs).

The counting itself lives in :mod:`controlplane.scheduling.actions`; this plugin reports its
rejections through the Filter extension point so they show up per plugin in explanations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduling.actions import RESOURCE_FIT, NodeActions
from controlplane.scheduling.framework import STATE_ACTIONS, CycleState, Handle, Rejection
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "NodeResourcesFit", "NodeResourcesFitArgs", "new"]

NAME = RESOURCE_FIT  # its rejections carry the label the core gives them without it


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """No arguments: quota bins and accelerator policy are the profile's ``action_space``."""


class NodeResourcesFit:
    name = NAME
    reports_resource_fit = True  # the framework's ResourceFitFilter capability

    def filter(self, state: CycleState, request: WorkloadRequest, nodes: NodeTable) -> list[Rejection]:
        actions: NodeActions = state.read(STATE_ACTIONS)
        return actions.rejections


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesFit:
    decode_args(NodeResourcesFitArgs, args, NAME)
    return NodeResourcesFit()
