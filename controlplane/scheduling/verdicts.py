"""Per-node answers for callers that schedule elsewhere (the Kubernetes extender): whether one
replica fits each named node, and why not; and the Score phase's totals for the nodes that fit.

Both run PreFilter and Filter over the whole node table, as a cycle does, and read the rows of the
named nodes; nothing is reserved, counted or sampled, and no random number is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controlplane.scheduling.cycle import CycleRunner, Filtered
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.types import Code

__all__ = ["NodeVerdict", "node_scores", "node_verdicts"]

_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node's Filter outcome for one replica."""

    fits: bool
    reason: str = ""
    """Why it does not fit: the first filter's reason (for an unresolvable node, the first
    unresolvable one's: that is why preemption cannot help)."""
    unresolvable: bool = False
    """Preemption would not make it fit (kube's UnschedulableAndUnresolvable)."""


UNKNOWN = NodeVerdict(False, "unknown node", True)


def node_verdicts(
    runner: CycleRunner, request: WorkloadRequest, names: Sequence[str]
) -> dict[str, NodeVerdict]:
    """Per name, whether one replica of ``request`` passes the runner's PreFilter and Filter now
    (a name the node table does not hold: :data:`UNKNOWN`)."""
    index = runner.nodes.index
    _, status, filtered = runner.filter_only(request)
    if filtered is None:  # a PreFilter plugin rejected the request itself: every node, alike
        failed = NodeVerdict(False, status.message(), status.code == _UNRESOLVABLE)
        return {name: failed if name in index else UNKNOWN for name in names}
    return {name: _verdict(filtered, index[name]) if name in index else UNKNOWN for name in names}


def _verdict(filtered: Filtered, row: int) -> NodeVerdict:
    if not filtered.rejected[row]:
        return NodeVerdict(True)
    if filtered.unresolvable[row]:
        for _, rejection in filtered.rejections:
            if rejection.code == _UNRESOLVABLE and rejection.mask[row]:
                return NodeVerdict(False, rejection.reason, True)
    return NodeVerdict(False, filtered.rejections[int(filtered.first[row])][1].reason)


def node_scores(runner: CycleRunner, request: WorkloadRequest, names: Sequence[str]) -> dict[str, float]:
    """The Score phase's weighted totals of the named nodes that pass Filter now, normalised over
    those nodes only (as a cycle normalises over its candidates); the others are left out. A
    node a plugin excluded from selection totals -inf."""
    index = runner.nodes.index
    state, _, filtered = runner.filter_only(request)
    if filtered is None:
        return {}
    wanted = sorted({index[name] for name in names if name in index})
    rows = np.array([r for r in wanted if not filtered.rejected[r]], dtype=np.int64)
    if len(rows) == 0:
        return {}
    totals = runner.score_only(state, request, filtered, rows)
    states = runner.nodes.states
    return {states[int(row)].name: float(total) for row, total in zip(rows, totals, strict=True)}
