"""Explanations of one scheduling cycle: what the mask removed, and why the chosen node won.

Pure functions of a cycle's intermediate results, returning the types of :mod:`.explanation`;
the cycle calls them only when asked to explain (explanations cost time on the hot path).
What reads the node table (names, clusters, the candidates' assignments) is taken at once, as
the table changes with the next placement; each candidate's per-plugin scores and explainer
extras are built on first read, from the cycle's own arrays and state, which nothing changes
after the cycle (the hub asks for explanations on every decision; most entries are read once,
when stored, and the simulator's never).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

import numpy as np

from controlplane.scheduling.actions import RESOURCE_FIT, Candidates, NodeActions
from controlplane.scheduling.explanation import (
    CandidateExplanation,
    CandidateExtras,
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


class _PluginScores(Mapping[str, PluginScore]):
    """Candidate ``k``'s score per plugin, built from the cycle's arrays on first read."""

    __slots__ = ("_built", "_k", "_per_plugin")

    def __init__(self, per_plugin: PluginScores, k: int) -> None:
        self._per_plugin: PluginScores | None = per_plugin
        self._k = k
        self._built: dict[str, PluginScore] = {}

    def _scores(self) -> dict[str, PluginScore]:
        if self._per_plugin is not None:
            k = self._k
            self._built = {
                name: PluginScore(raw=float(raw[k]), normalized=float(norm[k]), weight=weight)
                for name, weight, raw, norm in self._per_plugin
            }
            self._per_plugin = None  # built: the cycle's arrays can go
        return self._built

    def __getitem__(self, name: str) -> PluginScore:
        return self._scores()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._scores())

    def __len__(self) -> int:
        return len(self._scores())

    def __repr__(self) -> str:
        return repr(self._scores())


class _Extras(Sequence[CandidateExtras]):
    """What the explainers add to candidate ``k``, asked of them on first read."""

    __slots__ = ("_built", "_explainers", "_k", "_state")

    def __init__(self, explainers: Sequence[CandidateExplainer], state: CycleState, k: int) -> None:
        self._explainers: Sequence[CandidateExplainer] | None = explainers
        self._state = state
        self._k = k
        self._built: tuple[CandidateExtras, ...] = ()

    def _extras(self) -> tuple[CandidateExtras, ...]:
        if self._explainers is not None:
            extras = (explainer.explain_candidate(self._state, self._k) for explainer in self._explainers)
            self._built = tuple(extra for extra in extras if extra is not None)
            self._explainers = None
        return self._built

    @overload
    def __getitem__(self, index: int) -> CandidateExtras: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[CandidateExtras]: ...
    def __getitem__(self, index: int | slice) -> CandidateExtras | Sequence[CandidateExtras]:
        return self._extras()[index]

    def __len__(self) -> int:
        return len(self._extras())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._extras() == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._extras())


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
        return CandidateExplanation(
            node=nodes.names[row],
            cluster=nodes.states[row].cluster,
            score=float(total[k]),
            assignment=assignment if k == best else cand.assignment(k, nodes),
            plugins=_PluginScores(per_plugin, k),
            extras=_Extras(explainers, state, k),
        )

    return ReplicaExplanation(
        replica=replica,
        mask=report,
        nodes=NodeCounts(total=len(nodes), feasible=feasible_nodes, scored=len(cand)),
        chosen=entry(order[0]),
        alternatives=tuple(entry(k) for k in order[1:]),
    )
