"""DataLocality: prefer nodes that can read the workload's input data fastest.

The transfer time of ``data_bytes`` from ``data_location`` (a node or a region) to each node comes
from the topology graph (measured latency/bandwidth on a sliding window; the estimate is
:func:`~controlplane.scheduling.data_transfer.transfer_seconds`, still importable from here).
Score: minus that time, normalised so the fastest candidate gets 100 and the slowest 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.data_transfer import transfer_seconds
from controlplane.scheduling.framework import STATE_NOW, CycleState, FloatArray, Handle
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins._scores import min_max_scores
from controlplane.scheduling.plugins.args import decode_args

__all__ = ["NAME", "DataLocality", "DataLocalityArgs", "new", "transfer_seconds"]

NAME = "DataLocality"


@dataclass(frozen=True, slots=True)
class DataLocalityArgs:
    """No arguments (link defaults and the window are the topology graph's)."""


class DataLocality:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        result: FloatArray = -transfer_seconds(self.handle, request, cand.rows, state.get(STATE_NOW, 0.0))
        return result

    def normalize(self, state: CycleState, raw: FloatArray) -> FloatArray:
        return min_max_scores(raw)


def new(args: Mapping[str, Any], handle: Handle) -> DataLocality:
    decode_args(DataLocalityArgs, args, NAME)
    return DataLocality(handle)
