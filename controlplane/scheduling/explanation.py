"""Typed explanations of scheduling decisions, and their JSON for the store and the API.

The cycle builds them (:mod:`.explain`), :class:`~.model.Decision` and the hub's replica choices
carry them, the bid round reads them by attribute; ``to_dict`` turns them into JSON once, where
they are stored or returned. A leaf of the scheduler: it imports only the contract's reward
breakdown, so every scheduling and hub module may import it. What it holds of other modules
(assignments, victims, migrations, the cluster plan, bid rows) it holds as :class:`Jsonable`
values, none changed once decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from edgeplane_contract.objective import RewardBreakdown

__all__ = [
    "BidRound",
    "CandidateExplanation",
    "CandidateExtras",
    "CycleFailure",
    "DecisionScope",
    "Explanation",
    "Jsonable",
    "MaskReport",
    "NodeCounts",
    "PlacementExplanation",
    "PluginScore",
    "PostFilterExplanation",
    "ReplicaExplanation",
]


class Jsonable(Protocol):
    """A value of another module an explanation holds as it is and converts only in ``to_dict``."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class MaskReport:
    """Actions in total, masked and remaining; the masked ones by ``"plugin: reason"``."""

    total: int
    masked: int
    remaining: int
    masked_by: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "masked": self.masked,
            "remaining": self.remaining,
            "masked_by": dict(self.masked_by),
        }


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """Nodes in the table, passing the filters, and scored (after sampling)."""

    total: int
    feasible: int
    scored: int

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "feasible": self.feasible, "scored": self.scored}


@dataclass(frozen=True, slots=True)
class PluginScore:
    """One score plugin's view of a candidate: raw, normalised onto [0, 100], and its weight."""

    raw: float
    normalized: float
    weight: float

    def to_dict(self) -> dict[str, Any]:
        return {"raw": self.raw, "normalized": self.normalized, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class CandidateExtras:
    """What one plugin's ``explain_candidate`` adds to a candidate: the reward terms, and
    open-ended named terms (JSON keys of the candidate's entry, beside its own)."""

    reward: RewardBreakdown | None = None
    terms: Mapping[str, float | str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.reward is None else {"reward": self.reward.to_dict()}
        out.update(self.terms)
        return out


@dataclass(frozen=True, slots=True)
class CandidateExplanation:
    """A scored candidate: its node, total score, assignment, score per plugin, and what the
    plugins' explainers added (in plugin order: a later one's key replaces an earlier one's)."""

    node: str
    cluster: str
    score: float
    assignment: Jsonable
    plugins: Mapping[str, PluginScore]
    # A tuple, or a sequence the cycle fills on first read (see explain.py: explanations are
    # asked for on every decision and mostly read never, or once when stored).
    extras: Sequence[CandidateExtras] = ()

    @property
    def reward(self) -> RewardBreakdown | None:
        """The reward terms an explainer added (the last one's, as in the JSON), if any."""
        for extra in reversed(self.extras):
            if extra.reward is not None:
                return extra.reward
        return None

    def to_dict(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "node": self.node,
            "cluster": self.cluster,
            "score": self.score,
            "assignment": self.assignment.to_dict(),
            "plugins": {name: score.to_dict() for name, score in self.plugins.items()},
        }
        for extra in self.extras:
            item.update(extra.to_dict())
        return item


@dataclass(frozen=True, slots=True)
class CycleFailure:
    """Why a cycle found no node: the status code's name and the kube-style message."""

    status: str
    reason: str


@dataclass(frozen=True, slots=True)
class PostFilterExplanation:
    """The post-filter that made room for a replica: on which node, evicting or moving whom."""

    plugin: str
    node: str
    victims: tuple[Jsonable, ...] = ()
    migrations: tuple[Jsonable, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "plugin": self.plugin,
            "node": self.node,
            "victims": [v.to_dict() for v in self.victims],
            "migrations": [m.to_dict() for m in self.migrations],
        }


@dataclass(frozen=True, slots=True)
class ReplicaExplanation:
    """A replica's last cycle: the mask, then either the node counts, the chosen candidate and its
    runners-up, or the failure; and the post-filter when one made room."""

    replica: int
    mask: MaskReport
    nodes: NodeCounts | None = None
    chosen: CandidateExplanation | None = None
    alternatives: tuple[CandidateExplanation, ...] = ()
    failure: CycleFailure | None = None
    post_filter: PostFilterExplanation | None = None

    def __post_init__(self) -> None:
        scored = self.chosen is not None and self.nodes is not None
        if scored == (self.failure is not None) or (self.chosen is None) != (self.nodes is None):
            raise ValueError("a replica's explanation has a chosen node and node counts, or a failure")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"replica": self.replica, "actions": self.mask.to_dict()}
        if self.nodes is not None:
            out["nodes"] = self.nodes.to_dict()
        if self.chosen is not None:
            out["chosen"] = self.chosen.to_dict()
            out["alternatives"] = [a.to_dict() for a in self.alternatives]
        if self.failure is not None:
            out["status"] = self.failure.status
            out["reason"] = self.failure.reason
        if self.post_filter is not None:
            out["post_filter"] = self.post_filter.to_dict()
        return out


@dataclass(frozen=True, slots=True)
class DecisionScope:
    """What a decision was about: the profile, the workload, gang or not, the cluster plan."""

    profile: str
    workload: str
    gang: bool
    cluster_plan: Jsonable | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "workload": self.workload,
            "gang": self.gang,
            "cluster_plan": self.cluster_plan.to_dict() if self.cluster_plan is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """A decision's explanation: its scope and one entry per replica cycled. ``scope`` is None for
    a decision made with ``explain=False``, whose JSON is empty but for ``failover_from``."""

    scope: DecisionScope | None = None
    replicas: tuple[ReplicaExplanation, ...] = ()
    failover_from: tuple[str, ...] | None = None

    def replica(self, index: int) -> ReplicaExplanation | None:
        """The entry of replica ``index``; None when it was not cycled (or not explained)."""
        return next((r for r in self.replicas if r.replica == index), None)

    def for_replica(self, index: int) -> PlacementExplanation:
        """The part about replica ``index``, as the hub keeps it with that replica's placement."""
        return PlacementExplanation(self, self.replica(index))

    def to_dict(self, *, replicas: bool = True) -> dict[str, Any]:
        """The JSON; without ``replicas``, only the decision-wide keys."""
        out: dict[str, Any] = {}
        if self.scope is not None:
            out.update(self.scope.to_dict())
            if replicas:
                out["replicas"] = [r.to_dict() for r in self.replicas]
        if self.failover_from is not None:
            out["failover_from"] = list(self.failover_from)
        return out


@dataclass(frozen=True, slots=True)
class BidRound:
    """A replica's bid round: who decided (bid, hub-estimate, scheduler...), the winner, and one
    row per candidate (``hub.bidding.BidRow``)."""

    decided_by: str
    winner: str
    candidates: tuple[Jsonable, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "decided_by": self.decided_by,
            "winner": self.winner,
            "candidates": [c.to_dict() for c in self.candidates],
        }


@dataclass(frozen=True, slots=True)
class PlacementExplanation:
    """One placed replica's explanation as the store keeps it: the decision's wide keys and the
    replica's entry flattened into one object, then the bid round. Without an entry for the
    replica (``replica`` None) the whole decision's explanation stands in."""

    decision: Explanation = field(default_factory=Explanation)
    replica: ReplicaExplanation | None = None
    bids: BidRound | None = None

    @property
    def candidates(self) -> tuple[CandidateExplanation, ...]:
        """The chosen candidate, then its alternatives (empty when nothing was scored)."""
        if self.replica is None or self.replica.chosen is None:
            return ()
        return (self.replica.chosen, *self.replica.alternatives)

    def to_dict(self) -> dict[str, Any]:
        if self.replica is None:
            out = self.decision.to_dict()
        else:
            out = {**self.decision.to_dict(replicas=False), **self.replica.to_dict()}
        if self.bids is not None:
            out["bids"] = self.bids.to_dict()
        return out
