"""Versioned local policies (``/v1/policies``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from controlplane.api.views.base import DateTime, iso, one_of
from controlplane.store.models import PolicyRow

__all__ = [
    "CanaryEvent",
    "CanaryGroups",
    "CanarySamples",
    "CanaryStatus",
    "DecisionLogs",
    "MissingLog",
    "NodeDecisionLog",
    "Policy",
    "PolicyEvaluation",
    "PolicyList",
    "PolicyRolloutResult",
    "ProfileCanaryStatus",
]

POLICY_STATES = ("available", "promoted", "rolled_back")


@dataclass(frozen=True, slots=True)
class PolicyEvaluation:
    """The upload check on held-out decisions, against the version in force then."""

    agreement: Annotated[float, {"description": "share of decisions with the reference's action"}]
    mean_reward: Annotated[float, {"description": "this version's mean reward on those decisions"}]
    reference_mean_reward: float
    reference: Annotated[str, {"description": "'shipped' (the agents' built-in model) or 'v<N>'"}]
    cases: int
    seeds: list[int]


@dataclass(frozen=True, slots=True)
class Policy:
    """A version of the agents' local policy (the model itself is fetched by agents, not here)."""

    version: int
    sha256: str
    size: Annotated[int, {"description": "the model's bytes"}]
    state: Annotated[str, one_of(POLICY_STATES)]
    description: str
    feature_schema_version: int | None
    created_at: DateTime
    created_by: str
    evaluation: PolicyEvaluation
    running_on: Annotated[list[str], {"description": "nodes whose heartbeats say they run it"}]

    @classmethod
    def of(cls, row: PolicyRow, *, running_on: list[str] | None = None) -> Policy:
        fsv = row.meta.get("feature_schema_version")
        return cls(
            version=row.version,
            sha256=row.sha256,
            size=row.size,
            state=row.state,
            description=row.description,
            feature_schema_version=fsv if isinstance(fsv, int) else None,
            created_at=iso(row.created_at),
            created_by=row.created_by,
            evaluation=PolicyEvaluation(**row.evaluation),
            running_on=running_on or [],
        )


@dataclass(frozen=True, slots=True)
class PolicyList:
    items: list[Policy]
    total: int


@dataclass(frozen=True, slots=True)
class PolicyRolloutResult:
    """``POST /v1/policies/{version}/rollout``: the nodes told to run it (``changed``: those that
    were running something else); the distributor brings them to it within seconds."""

    version: int
    nodes: list[str]
    changed: list[str]


@dataclass(frozen=True, slots=True)
class CanaryEvent:
    """One decision of the canary controller (t_s: seconds since the canary started)."""

    t_s: float
    kind: Annotated[str, one_of(("start", "step", "promote", "rollback"))]
    fraction: float
    canary_score: float
    control_score: float
    baseline: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class CanaryGroups:
    canary: float
    control: float


@dataclass(frozen=True, slots=True)
class CanarySamples:
    canary: int
    control: int


@dataclass(frozen=True, slots=True)
class CanaryClassSignal:
    """One signal of one class in a canary: its samples and anomaly scores per group."""

    signal: str
    samples: CanarySamples
    scores: CanaryGroups


@dataclass(frozen=True, slots=True)
class CanaryClass:
    """A class of a canary's members (a node type, a workload kind), its signals judged on their
    own: a version that hurts one class only is not hidden by the others."""

    name: str
    signals: list[CanaryClassSignal]

    @classmethod
    def of(cls, d: dict[str, Any]) -> CanaryClass:
        signals = [
            CanaryClassSignal(s["signal"], CanarySamples(**s["samples"]), CanaryGroups(**s["scores"]))
            for s in d["signals"]
        ]
        return cls(name=d["name"], signals=signals)


def _canary_fields(d: dict[str, Any]) -> dict[str, Any]:
    """What both live canaries describe alike (``rollout.live.LiveRollout``): state, share, the
    controller's and the outcome guard's samples and scores, the classes, timeline, failure."""
    return {
        "state": d["state"],
        "fraction": d["fraction"],
        "samples": CanarySamples(**d["samples"]),
        "scores": CanaryGroups(**d["scores"]),
        "outcome_samples": CanarySamples(**d["outcome_samples"]),
        "outcome_scores": CanaryGroups(**d["outcome_scores"]),
        "classes": [CanaryClass.of(c) for c in d["classes"]],
        "events": [CanaryEvent(**e) for e in d["events"]],
        "failure": d["failure"],
    }


@dataclass(frozen=True, slots=True)
class CanaryStatus:
    """A live canary (``/v1/policies/{version}/canary``): its state, the share of nodes it has,
    the anomaly scores, the samples counted, its timeline, and the nodes told to run it."""

    version: int
    state: Annotated[str, one_of(("canary", "promoted", "rolled_back"))]
    fraction: float
    samples: CanarySamples
    scores: CanaryGroups
    outcome_samples: Annotated[CanarySamples, {"description": "outcomes against SLA counted (the guard)"}]
    outcome_scores: CanaryGroups
    drain_samples: Annotated[
        CanarySamples, {"description": "battery drain samples counted (the energy guard; nodes on battery)"}
    ]
    drain_scores: CanaryGroups
    energy_samples: Annotated[
        CanarySamples,
        {
            "description": "placements ended Succeeded counted (the energy-per-workload guard: each one's "
            "mean draw per requested vCPU, from the nodes' reported power)"
        },
    ]
    energy_scores: CanaryGroups
    classes: Annotated[list[CanaryClass], {"description": "the same signals per node type"}]
    events: list[CanaryEvent]
    nodes: list[str]
    failure: Annotated[str, {"description": "why the controller stopped early, if it did"}]

    @classmethod
    def of(cls, described: dict[str, object]) -> CanaryStatus:
        d: dict[str, Any] = dict(described)
        return cls(
            version=d["version"],
            **_canary_fields(d),
            drain_samples=CanarySamples(**d["drain_samples"]),
            drain_scores=CanaryGroups(**d["drain_scores"]),
            energy_samples=CanarySamples(**d["energy_samples"]),
            energy_scores=CanaryGroups(**d["energy_scores"]),
            nodes=list(d["nodes"]),
        )


@dataclass(frozen=True, slots=True)
class NodeDecisionLog:
    """One node's decision log, as its agent sent it (rewards already Laplace-noised there)."""

    node: str
    epsilon: Annotated[float, {"description": "the Laplace epsilon the node noised its rewards for"}]
    truncated: Annotated[bool, {"description": "fewer entries than asked: the rest did not fit one message"}]
    entries: Annotated[
        list[dict[str, Any]],
        {
            "description": "oldest first: t, request_id, workload_id, replica, state, offer, weights, "
            "action, decline, expected_reward (noised), source, purpose"
        },
    ]


@dataclass(frozen=True, slots=True)
class MissingLog:
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class DecisionLogs:
    """``POST /v1/decision-logs``: the logs collected now, and the nodes that gave none."""

    nodes: list[NodeDecisionLog]
    missing: list[MissingLog]
    entries: Annotated[int, {"description": "entries in all"}]


@dataclass(frozen=True, slots=True)
class ProfileCanaryStatus:
    """A scheduling profile canary (``/v1/scheduling-profiles/canary``): the candidate, the
    profile in force when it started, its share of new workloads, the placement-delay samples
    and anomaly scores of both groups (and of the outcome guard), and its timeline."""

    profile: str
    previous: str
    state: Annotated[str, one_of(("canary", "promoted", "rolled_back"))]
    fraction: float
    samples: CanarySamples
    scores: CanaryGroups
    outcome_samples: Annotated[CanarySamples, {"description": "outcomes against SLA counted (the guard)"}]
    outcome_scores: CanaryGroups
    classes: Annotated[list[CanaryClass], {"description": "the same signals per workload kind"}]
    events: list[CanaryEvent]
    failure: Annotated[str, {"description": "why the controller stopped early, if it did"}]

    @classmethod
    def of(cls, described: dict[str, object]) -> ProfileCanaryStatus:
        d: dict[str, Any] = dict(described)
        return cls(profile=d["profile"], previous=d["previous"], **_canary_fields(d))


@dataclass(frozen=True, slots=True)
class SchedulingProfile:
    """The placement profile in force (``GET /v1/scheduling-profiles/current``) and, while a
    profile canary runs, its candidate. ``origin``: ``started`` (the hub's ``--scheduler``
    profile) or ``promoted`` (a canary promoted it; kept in the store across restarts)."""

    name: str
    profile: dict[str, Any]
    canary: str | None
    origin: Annotated[str, one_of(("started", "promoted"))]
