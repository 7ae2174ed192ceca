"""DefaultBinder: in-process binding. The ledger already holds the reservation; binding only
records that the placement is final (the hub dispatches the replica after the decision)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduling.framework import CycleState, Handle, Status
from controlplane.scheduling.model import Assignment, WorkloadRequest
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "STATE_BOUND", "DefaultBinder", "DefaultBinderArgs", "new"]

NAME = "DefaultBinder"
STATE_BOUND = "DefaultBinder/bound"


@dataclass(frozen=True, slots=True)
class DefaultBinderArgs:
    """No arguments."""


class DefaultBinder:
    name = NAME

    def bind(
        self, state: CycleState, request: WorkloadRequest, replica: int, node: int, assignment: Assignment
    ) -> Status:
        bound = state.get(STATE_BOUND) or []
        bound.append((replica, node))
        state.write(STATE_BOUND, bound)
        return Status.success()


def new(args: Mapping[str, Any], handle: Handle) -> DefaultBinder:
    decode_args(DefaultBinderArgs, args, NAME)
    return DefaultBinder()
