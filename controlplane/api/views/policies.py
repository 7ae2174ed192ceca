"""Versioned local policies (``/v1/policies``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from controlplane.api.views.base import DateTime, iso, one_of
from controlplane.store.models import PolicyRow

__all__ = ["Policy", "PolicyEvaluation", "PolicyList", "PolicyRolloutResult"]

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
