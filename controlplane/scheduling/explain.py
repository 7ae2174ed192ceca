"""Explanations of one scheduling cycle: what the mask removed, and why the chosen node won.

Pure functions of a cycle's intermediate results, returning the types of :mod:`.explanation`;
the cycle calls them only when asked to explain (explanations cost time on the hot path).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controlplane.scheduling.actions import RESOURCE_FIT, Candidates, NodeActions
from controlplane.scheduling.explanation import (
    CandidateExplanation,
    MaskReport,
    NodeCounts,
    PluginScore,
    ReplicaExplanation,
)
from controlplane.scheduling.framework import BoolArray, CandidateExplainer, CycleState, FloatArray, Rejection
from controlplane.scheduling.model import Assignment
from controlplane.scheduling.nodetable import NodeTable

__all__ = ["PluginScores", "explain_choice", "mask_report"]

PluginScores = list[tuple[str, float, FloatArray, FloatArray]]
"""Per score plugin: (name, weight, raw scores, normalised scores) over the candidates."""


def mask_report(
    actions: NodeActions,
    rejections: Sequence[tuple[str, Rejection]],
    first: np.ndarray,
    rejected: BoolArray,
    feasible: np.ndarray,
) -> MaskReport:
    """Actions in total, masked and remaining, and the masked ones by the first rejection of
    their node (``first``: index into ``rejections`` per node, for the ``rejected`` ones)."""
    total = int(actions.total.sum())
    remaining = int(actions.feasible[feasible].sum())
    by: dict[str, int] = {}
    if rejected.any():
        sums = np.bincount(first[rejected], weights=actions.total[rejected], minlength=len(rejections))
        for k, value in enumerate(sums):
            if value:
                name, rej = rejections[k]
                key = f"{name}: {rej.reason}"
                by[key] = by.get(key, 0) + int(value)
    partial = int((actions.total[feasible] - actions.feasible[feasible]).sum())
    if partial:
        by[f"{RESOURCE_FIT}: infeasible quota/accelerator options on feasible nodes"] = partial
    return MaskReport(total=total, masked=total - remaining, remaining=remaining, masked_by=by)


def explain_choice(
    nodes: NodeTable,
    explainers: Sequence[CandidateExplainer],
    top: int,
    *,
    replica: int,
    report: MaskReport,
    cand: Candidates,
    total: FloatArray,
    per_plugin: PluginScores,
    best: int,
    assignment: Assignment,
    state: CycleState,
    feasible_nodes: int,
    ranking: FloatArray,
) -> ReplicaExplanation:
    """The chosen candidate ``best`` and up to ``top`` runners-up, each with its score per plugin
    and whatever the plugins' :class:`~.framework.CandidateExplainer` capability adds."""
    k = min(top + 1, len(ranking))
    best_first = np.argpartition(-ranking, k - 1)[:k] if k < len(ranking) else np.arange(len(ranking))
    best_first = best_first[np.argsort(-ranking[best_first], kind="stable")]
    # Alternatives are nodes that could have been chosen (not excluded ones).
    order = [best, *[int(i) for i in best_first if int(i) != best and ranking[i] > -np.inf][:top]]

    def entry(k: int) -> CandidateExplanation:
        row = int(cand.rows[k])
        extras = (explainer.explain_candidate(state, k) for explainer in explainers)
        return CandidateExplanation(
            node=nodes.names[row],
            cluster=nodes.states[row].cluster,
            score=float(total[k]),
            assignment=assignment if k == best else cand.assignment(k, nodes),
            plugins={
                name: PluginScore(raw=float(raw[k]), normalized=float(norm[k]), weight=weight)
                for name, weight, raw, norm in per_plugin
            },
            extras=tuple(extra for extra in extras if extra is not None),
        )

    return ReplicaExplanation(
        replica=replica,
        mask=report,
        nodes=NodeCounts(total=len(nodes), feasible=feasible_nodes, scored=len(cand)),
        chosen=entry(order[0]),
        alternatives=tuple(entry(k) for k in order[1:]),
    )
