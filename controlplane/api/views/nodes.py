"""Clusters, nodes, and a node's enrolment and revocation."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

from controlplane.api.params import NODE_STATUS
from controlplane.api.views.base import DateTime, iso, one_of
from controlplane.hub.forget import ForgottenNode
from controlplane.store.models import ClusterRow, NodeRow

__all__ = [
    "Cluster",
    "ClusterList",
    "DeletedNode",
    "JoinReply",
    "Node",
    "NodePage",
    "NodePower",
    "Revoked",
    "RevokedNode",
    "RevokedUnknownNode",
]

CLUSTER_STATUSES = ("Unknown", "Available", "Unavailable")


@dataclass(frozen=True, slots=True)
class NodePower:
    source: str
    battery_percent: float | None


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the hub last heard of it, with what its placements hold."""

    name: str
    cluster: str
    region: str
    status: Annotated[str, one_of(NODE_STATUS.choices)]
    node_type: str
    labels: dict[str, Any]
    resources: dict[str, Any]
    allocated: dict[str, Any]
    power: NodePower
    weights: Annotated[dict[str, float], {"description": "the node's objective weights w1..w4"}]
    telemetry: dict[str, Any]
    isolation: dict[str, str]
    agent_version: str
    heartbeat_interval_s: float
    registered_at: DateTime
    last_heartbeat_at: DateTime
    revoked: Annotated[
        bool, {"description": "its credentials are revoked: it cannot connect until it enrols again"}
    ]
    policy_version: Annotated[
        int | None,
        {"description": "the local-policy version its heartbeats report (null: the shipped model)"},
    ]

    @classmethod
    def of(
        cls,
        row: NodeRow,
        *,
        region: str,
        allocated: dict[str, Any],
        revoked: bool = False,
        policy_version: int | None = None,
    ) -> Node:
        telemetry = row.telemetry or {}
        return cls(
            name=row.name,
            cluster=row.cluster,
            region=region,
            status=row.status,
            node_type=row.node_type,
            labels=row.labels,
            resources=row.resources,
            allocated=allocated,
            power=NodePower(source=row.power_source, battery_percent=row.battery_percent),
            weights=dict(zip(("w1", "w2", "w3", "w4"), telemetry.get("weights") or [], strict=False)),
            telemetry=telemetry,
            isolation=row.isolation or {},
            agent_version=row.agent_version,
            heartbeat_interval_s=row.heartbeat_interval_s,
            registered_at=iso(row.registered_at),
            last_heartbeat_at=iso(row.last_heartbeat_at),
            revoked=revoked,
            policy_version=policy_version,
        )


@dataclass(frozen=True, slots=True)
class NodePage:
    items: list[Node]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True, slots=True)
class RevokedNode(Node):
    """``DELETE /v1/nodes/{name}`` of a node the store knows: the node, its credentials revoked."""

    credentials: Literal["revoked"]

    @classmethod
    def of_node(cls, node: Node) -> RevokedNode:
        return cls(**{f.name: getattr(node, f.name) for f in fields(Node)}, credentials="revoked")


@dataclass(frozen=True, slots=True)
class RevokedUnknownNode:
    """``DELETE /v1/nodes/{name}`` of a node enrolled but never registered: only its name."""

    name: str
    credentials: Literal["revoked"]


Revoked = RevokedNode | RevokedUnknownNode


@dataclass(frozen=True, slots=True)
class DeletedNode:
    """``DELETE /v1/nodes/{name}?forget=true``: the node the hub no longer knows."""

    name: str
    cluster: Annotated[str, {"description": "empty for a node enrolled but never registered"}]
    status: Annotated[str, {"description": "its status when deleted (empty: never registered)"}]
    deleted: bool
    forced: Annotated[bool, {"description": "it was Ready, deleted with force=true"}]
    credentials_revoked: Annotated[
        bool, {"description": "revoked by this delete (false: revoked before, or it had none)"}
    ]
    placements_lost: Annotated[
        list[str], {"description": "its placements ended as Lost (their replicas are placed again)"}
    ]

    @classmethod
    def of(cls, forgotten: ForgottenNode) -> DeletedNode:
        return cls(
            name=forgotten.name,
            cluster=forgotten.cluster,
            status=forgotten.status,
            deleted=True,
            forced=forgotten.forced,
            credentials_revoked=forgotten.credentials_revoked,
            placements_lost=list(forgotten.placements_lost),
        )


@dataclass(frozen=True, slots=True)
class Cluster:
    name: str
    region: str
    status: Annotated[str, one_of(CLUSTER_STATUSES)]
    nodes: int
    ready_nodes: int

    @classmethod
    def of(cls, row: ClusterRow, counts: dict[str, int]) -> Cluster:
        """``counts``: the cluster's nodes by status."""
        return cls(
            name=row.name,
            region=row.region,
            status=row.status,
            nodes=sum(counts.values()),
            ready_nodes=counts.get("Ready", 0),
        )


@dataclass(frozen=True, slots=True)
class ClusterList:
    items: list[Cluster]
    total: int


@dataclass(frozen=True, slots=True)
class JoinReply:
    """``POST /v1/join``: where and how the enrolled node connects to NATS."""

    node: str
    cluster: str
    nats_url: str
    subject_prefix: str
    inbox_prefix: str
    hub_public_key: Annotated[str, {"description": "the hub's nkey: it signs policy versions"}]
