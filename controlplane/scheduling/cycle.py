"""One scheduling cycle for one replica: PreFilter, Filter (masks), sample, Score, select.

Reserve and Bind follow in :mod:`.commit`; PostFilter (preemption, merges) in :mod:`.placement`
when a cycle finds no node. A :data:`Chooser` set on the runner picks among the scored
candidates instead of the profile's selection (the simulator's stepping API, issue 23).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from controlplane.scheduling.actions import RESOURCE_FIT, ActionSpace, Candidates, NodeActions
from controlplane.scheduling.explain import PluginScores, explain_choice, mask_report
from controlplane.scheduling.explanation import CycleFailure, MaskReport, ReplicaExplanation
from controlplane.scheduling.framework import (
    MAX_NODE_SCORE,
    STATE_ACTIONS,
    STATE_EXCLUDED,
    STATE_NOW,
    STATE_REPLICA,
    BoolArray,
    Code,
    CycleState,
    FloatArray,
    Rejection,
    Status,
    clip,
)
from controlplane.scheduling.model import Assignment, Feasibility, WorkloadRequest
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugin_set import PluginSet
from controlplane.scheduling.profiles import Profile

__all__ = ["DEFER", "DEFERRED", "Choice", "Chooser", "Cycle", "CycleRunner", "Filtered", "counted"]

_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
DEFER = -1
"""What a :data:`Chooser` returns to place nothing now: the replica waits in the queue."""
DEFERRED = "deferred by the chooser"


@dataclass(slots=True)
class Cycle:
    """The result of one scheduling cycle for one replica."""

    status: Status
    state: CycleState
    row: int = -1
    assignment: Assignment | None = None
    unresolvable: BoolArray | None = None
    explanation: ReplicaExplanation | None = None


@dataclass(slots=True)
class Choice:
    """One replica's scored candidates, handed to a :data:`Chooser` before selection."""

    request: WorkloadRequest
    replica: int
    state: CycleState
    cand: Candidates
    """One action per candidate node (``cand.rows`` index the node table)."""
    ranking: FloatArray
    """The profile's Score totals (-inf where a plugin excluded the candidate)."""
    best: int
    """The profile's own pick (an index into ``cand``), its tie-break already drawn."""


Chooser = Callable[[Choice], int]
"""Returns an index into ``choice.cand``, or :data:`DEFER`."""


@dataclass(slots=True)
class Filtered:
    """What the Filter phase left of the node table for one replica."""

    actions: NodeActions
    rejections: list[tuple[str, Rejection]]
    rejected: BoolArray
    unresolvable: BoolArray
    first: np.ndarray
    """Per node, the index in ``rejections`` of the first one that put it out (-1: none did)."""

    def message(self) -> str:
        """kube-scheduler's summary: ``0/N nodes are available: 3 <reason>, 1 <reason>``."""
        n = len(self.rejected)
        counts = np.bincount(self.first[self.rejected], minlength=len(self.rejections)) if n else np.zeros(0)
        parts = [counted(int(c), self.rejections[k][1].reason) for k, c in enumerate(counts) if c]
        return f"0/{n} nodes are available" + (": " + ", ".join(parts) if parts else "")


# A reason written of one node ("node has too little cpu"), said of several.
_PLURAL_SUBJECTS = (("node has ", "nodes have "), ("node is ", "nodes are "), ("node does ", "nodes do "))


def counted(count: int, reason: str) -> str:
    """``3 nodes have too little cpu``, ``1 node has too little cpu``; a reason kube writes with a
    resource ("Insufficient cpu") reads the same for any count, as in kube-scheduler's summary."""
    if count != 1:
        for one, many in _PLURAL_SUBJECTS:
            if reason.startswith(one):
                reason = many + reason[len(one) :]
                break
    return f"{count} {reason}"


class CycleRunner:
    """Runs cycles over the scheduler's node table with its plugins.

    Holds the state that carries from cycle to cycle: the rotating start of node sampling and
    the tie-break random stream. ``unavailable`` (clusters) and ``stats`` are the scheduler's own
    objects, shared, not copies.
    """

    def __init__(
        self,
        nodes: NodeTable,
        plugins: PluginSet,
        profile: Profile,
        *,
        clock: Callable[[], float],
        rng: random.Random,
        unavailable: set[str],
        stats: dict[str, int],
        explain_top: int,
    ) -> None:
        self.nodes = nodes
        self.plugins = plugins
        self.profile = profile
        self.space = ActionSpace(profile.action_space)
        self.clock = clock
        self.rng = rng
        self.unavailable = unavailable
        self.stats = stats
        self.explain_top = explain_top
        self.next_start = 0
        """Where the next sampled cycle starts looking (reset when the node rows shift)."""
        self.chooser: Chooser | None = None
        """Who picks among the scored candidates (None: :meth:`select`, the profile's rule)."""

    def rejections(
        self, state: CycleState, request: WorkloadRequest, actions: NodeActions, restrict: BoolArray | None
    ) -> list[tuple[str, Rejection]]:
        """Every reason a node is out, labelled by who rejects it, in the order they count."""
        t = self.nodes
        out: list[tuple[str, Rejection]] = []
        if self.unavailable:
            ids = [t.clusters.ids[c] for c in self.unavailable if c in t.clusters.ids]
            out.append(
                ("Federation", Rejection(np.isin(t.cluster, ids), "cluster unavailable", _UNRESOLVABLE))
            )
        if restrict is not None:
            out.append(
                (
                    "ClusterPlacement",
                    Rejection(~restrict, "node(s) not in the planned cluster", _UNRESOLVABLE),
                )
            )
        if self.plugins.fit_builtin:
            out.extend((RESOURCE_FIT, r) for r in actions.rejections)
        for plugin in self.plugins.filters:
            out.extend((plugin.name, r) for r in plugin.filter(state, request, t))
        return out

    def filter(self, state: CycleState, request: WorkloadRequest, restrict: BoolArray | None) -> Filtered:
        """The Filter phase for one replica: which nodes are out, and who put each out first."""
        n = len(self.nodes)
        actions = self.space.analyse(self.nodes, request.resources)
        state.write(STATE_ACTIONS, actions)
        rejections = self.rejections(state, request, actions, restrict)
        rejected = np.zeros(n, dtype=bool)
        unresolvable = np.zeros(n, dtype=bool)
        first = np.full(n, -1, dtype=np.int64)
        for k, (_, rej) in enumerate(rejections):
            fresh = rej.mask & ~rejected
            first[fresh] = k
            rejected |= rej.mask
            if rej.code == _UNRESOLVABLE:
                unresolvable |= rej.mask
        return Filtered(actions, rejections, rejected, unresolvable, first)

    def feasible(self, request: WorkloadRequest) -> Feasibility:
        """The nodes where one replica of ``request`` fits now (see :meth:`filter_only`)."""
        _, status, filtered = self.filter_only(request)
        if filtered is None:
            return Feasibility((), status.message())
        names = tuple(self.nodes.states[int(r)].name for r in np.flatnonzero(~filtered.rejected))
        return Feasibility(names, "" if names else filtered.message())

    def filter_only(self, request: WorkloadRequest) -> tuple[CycleState, Status, Filtered | None]:
        """PreFilter and Filter for one replica over every node, with no effect on the runner
        (nothing scored, reserved or counted): the cycle state, PreFilter's status and the
        Filter record (None when a PreFilter plugin failed). The Kubernetes extender reads it."""
        return self._pre_filter_and_filter(request, 0, None)

    def _pre_filter_and_filter(
        self, request: WorkloadRequest, replica: int, restrict: BoolArray | None
    ) -> tuple[CycleState, Status, Filtered | None]:
        state = CycleState()
        state.write(STATE_NOW, self.clock())
        state.write(STATE_REPLICA, replica)
        for pre in self.plugins.pre_filters:
            status = pre.pre_filter(state, request, self.nodes)
            if not status.ok:
                return state, replace(status, plugin=status.plugin or pre.name), None
        return state, Status.success(), self.filter(state, request, restrict)

    def score_only(
        self, state: CycleState, request: WorkloadRequest, filtered: Filtered, rows: np.ndarray
    ) -> FloatArray:
        """The Score phase's weighted totals for ``rows`` (all passed ``filtered``), without
        sampling or selection (the sampling start and the tie-break stream are untouched); a
        candidate a plugin excluded from selection totals -inf, as it ranks in :meth:`run`."""
        cand = self.space.candidates(self.nodes, request.resources, filtered.actions, rows)
        return self._score(state, request, cand)[1]

    def _score(
        self, state: CycleState, request: WorkloadRequest, cand: Candidates
    ) -> tuple[FloatArray, FloatArray, PluginScores]:
        """The Score phase: (weighted totals, the ranking (-inf where a plugin excluded the
        candidate, unless it excluded all), and each plugin's raw and normalised scores)."""
        total = np.zeros(len(cand))
        per_plugin: PluginScores = []
        for plugin, weight, normalizer in self.plugins.scorers:
            raw = plugin.score(state, request, cand)
            norm = clip(raw, 0.0, MAX_NODE_SCORE) if normalizer is None else normalizer.normalize(state, raw)
            total += weight * norm
            per_plugin.append((plugin.name, weight, raw, norm))
        ranking = total
        excluded = state.get(STATE_EXCLUDED)
        if excluded is not None and excluded.any() and not excluded.all():
            ranking = np.where(excluded, -np.inf, total)
        return total, ranking, per_plugin

    def sample(self, feasible: np.ndarray, n: int) -> np.ndarray:
        """kube-scheduler's percentageOfNodesToScore with a rotating start index; never fewer
        than the profile's ``min_nodes_to_score`` (kube's minFeasibleNodesToFind, 100)."""
        pct = self.profile.percentage_of_nodes_to_score
        floor = self.profile.min_nodes_to_score
        if pct == 100 or n < floor:
            return feasible
        if pct == 0:
            pct = max(5, 50 - n // 125)
        limit = max(floor, n * pct // 100)
        start = self.next_start % n
        if len(feasible) <= limit:
            self.next_start = start  # visited every node: the index wraps to where it was
            return feasible
        order = np.concatenate([feasible[feasible >= start], feasible[feasible < start]])
        chosen = order[:limit]
        processed = int((chosen[-1] - start) % n) + 1
        self.next_start = (start + processed) % n
        return chosen

    def select(self, total: FloatArray) -> int:
        """The best-ranked candidate; ties broken by the profile's rule."""
        best = float(total.max())
        ties = np.flatnonzero(total >= best)
        if len(ties) == 1 or self.profile.tie_break == "first":
            return int(ties[0])
        return int(ties[self.rng.randrange(len(ties))])

    def _deferred(self, replica: int, state: CycleState, report: MaskReport | None) -> Cycle:
        """The chooser placed nothing: unresolvable, so no post-filter evicts for it."""
        status = Status(_UNRESOLVABLE, (DEFERRED,))
        expl = (
            ReplicaExplanation(replica, report, failure=CycleFailure(_UNRESOLVABLE.name, DEFERRED))
            if report is not None
            else None
        )
        n = len(self.nodes)
        return Cycle(status=status, state=state, unresolvable=np.ones(n, dtype=bool), explanation=expl)

    def run(self, request: WorkloadRequest, replica: int, restrict: BoolArray | None, explain: bool) -> Cycle:
        """One cycle for ``replica``, over the nodes in ``restrict`` (all when None)."""
        self.stats["cycles"] += 1
        t = self.nodes
        n = len(t)
        state, status, filtered = self._pre_filter_and_filter(request, replica, restrict)
        if filtered is None:
            return Cycle(status=status, state=state, unresolvable=np.ones(n, dtype=bool))
        actions, unresolvable = filtered.actions, filtered.unresolvable
        feasible = np.flatnonzero(~filtered.rejected)
        # The mask report is only for explanations: not computed on the hot path without one.
        report = (
            mask_report(actions, filtered.rejections, filtered.first, filtered.rejected, feasible)
            if explain
            else None
        )
        if len(feasible) == 0:
            message = filtered.message()
            code = Code.UNSCHEDULABLE if (~unresolvable).any() else _UNRESOLVABLE
            expl = (
                ReplicaExplanation(replica, report, failure=CycleFailure(code.name, message))
                if report is not None
                else None
            )
            return Cycle(
                status=Status(code, (message,)), state=state, unresolvable=unresolvable, explanation=expl
            )
        rows = self.sample(feasible, n)
        cand = self.space.candidates(t, request.resources, actions, rows)
        total, ranking, per_plugin = self._score(state, request, cand)
        best = self.select(ranking)
        if self.chooser is not None:
            # The profile's pick is drawn first either way, so its tie-break stream advances
            # exactly as without a chooser: a chooser that returns it changes nothing.
            best = self.chooser(Choice(request, replica, state, cand, ranking, best))
            if best == DEFER:
                return self._deferred(replica, state, report)
        assignment = cand.assignment(best, t)
        expl = None
        if report is not None:
            expl = explain_choice(
                t,
                self.plugins.explainers,
                self.explain_top,
                replica=replica,
                report=report,
                cand=cand,
                total=total,
                per_plugin=per_plugin,
                best=best,
                assignment=assignment,
                state=state,
                feasible_nodes=len(feasible),
                ranking=ranking,
            )
        return Cycle(
            status=Status.success(),
            state=state,
            row=int(rows[best]),
            assignment=assignment,
            unresolvable=unresolvable,
            explanation=expl,
        )
