"""The node registry: who may register, what the hub knows of each node (leases, readiness, power),
and the node and cluster rows that follow from it.

The hub owns one and decides what a change means for the work (``hub.service``); the bid round and
the function service read it through ``NodeDirectory``. Every method that takes a session runs
inside the hub's lock and the caller's transaction.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.messages import HeartbeatV1, RegisterV1, Telemetry, valid_token

from controlplane.bus.hub_bus import HubBus
from controlplane.federation.config import FederationConfig
from controlplane.hub.nodes import NodeLive
from controlplane.hub.placement import PlacementNode
from controlplane.hub.registration import (
    Capacity,
    RegistrationLimits,
    RegistrationProblem,
    Rule,
    identity_problem,
    registration_problem,
)
from controlplane.store import queries
from controlplane.store.identities import IdentityStore
from controlplane.store.models import ClusterRow, NodeRow
from controlplane.store.store import Store

__all__ = ["NodeRegistry", "placement_node"]

# At most one RegistrationRefused event per node and rule in this many seconds.
REFUSAL_EVENT_EVERY_S = 60.0


class NodeRegistry:
    """The live view of the nodes, rebuilt from the store on start and from registrations."""

    def __init__(
        self,
        federation: FederationConfig,
        bus: HubBus,
        identities: IdentityStore,
        *,
        lease_missed_heartbeats: int,
        limits: RegistrationLimits,
        require_enrolment: bool,
    ) -> None:
        self.federation = federation
        self.bus = bus
        self.identities = identities
        self.lease_missed_heartbeats = lease_missed_heartbeats
        self.limits = limits
        self.require_enrolment = require_enrolment
        self.nodes: dict[str, NodeLive] = {}
        # (node, rule) -> when its last RegistrationRefused event was written (enrolled nodes only).
        self._refusal_events: dict[tuple[str, str], float] = {}

    async def load(self, s: AsyncSession) -> list[NodeRow]:
        """Known clusters and nodes from the store; a restarted hub gives every known node one
        full lease to show up again. Returns the node rows (for the placer)."""
        now = time.time()
        mono = asyncio.get_running_loop().time()
        for cluster in self.federation.clusters:
            row = await s.get(ClusterRow, cluster.name)
            if row is None:
                s.add(ClusterRow(name=cluster.name, region=cluster.region, status="Unknown", updated_at=now))
            else:
                row.region = cluster.region
                row.updated_at = now
        rows = await queries.all_nodes(s)
        for node in rows:
            self.nodes[node.name] = NodeLive(
                name=node.name,
                cluster=node.cluster,
                status=node.status,
                boot_id=node.boot_id,
                lease_s=node.heartbeat_interval_s * self.lease_missed_heartbeats,
                last_seen=mono,
                telemetry=node.telemetry,
                power_source=node.power_source,
                battery_percent=node.battery_percent,
                last_heartbeat_at=node.last_heartbeat_at,
            )
        return rows

    async def refusal(self, node_name: str, msg: RegisterV1) -> str | None:
        """Why a registration is refused (None: admitted so far): a subject that names another
        node, an unknown cluster, an implausible message, a node without credentials, a claim its
        identity does not admit (hub/registration.py: identity_problem)."""
        if msg.node != node_name or not valid_token(node_name):
            return "node name does not match subject"
        if self.federation.cluster(msg.cluster) is None:
            known = ", ".join(c.name for c in self.federation.clusters)
            return f"unknown cluster {msg.cluster!r} (known: {known})"
        problem = registration_problem(msg, self.limits)
        if problem is not None:
            return str(problem)
        if self.require_enrolment:
            credential = await self.identities.node_credential(node_name)
            if credential is None:
                return f"node {node_name!r} has no active credentials (enrol it with a join token)"
            if credential.cluster != msg.cluster:
                return (
                    f"node {node_name!r} is enrolled in cluster {credential.cluster!r}, not {msg.cluster!r}"
                )
            problem = await self._identity_problem(node_name, msg, credential.capacity)
            if problem is not None:
                await self._refusal_event(node_name, problem)
                return str(problem)
        return None

    async def _identity_problem(
        self, node_name: str, msg: RegisterV1, recorded: dict[str, Any] | None
    ) -> RegistrationProblem | None:
        """What the node's identity does not admit of ``msg``; its first admitted claim with its
        key is recorded as the bound of the later ones."""
        enrolled = None if recorded is None else Capacity.of(recorded)
        problem = identity_problem(msg, self.limits, enrolled=enrolled)
        if problem is not None or enrolled is not None:
            return problem
        bound = await self.identities.bind_capacity(node_name, Capacity.claimed(msg.resources).as_dict())
        if bound is None:  # revoked meanwhile
            return RegistrationProblem("node", "credentials revoked", Rule.BOUNDS)
        # Another registration may have recorded its claim first: this one is checked against it.
        return identity_problem(msg, self.limits, enrolled=Capacity.of(bound))

    async def _refusal_event(self, node_name: str, problem: RegistrationProblem) -> None:
        """``RegistrationRefused`` with the rule, at most one per node and rule a minute (a node
        retries its registration every few seconds; the bus counts every refusal)."""
        key = (node_name, problem.rule)
        now = time.monotonic()
        if now - self._refusal_events.get(key, -REFUSAL_EVENT_EVERY_S) < REFUSAL_EVENT_EVERY_S:
            return
        self._refusal_events[key] = now
        async with self.identities.store.session() as s:
            Store.add_event(
                s,
                "RegistrationRefused",
                "node",
                node_name,
                str(problem),
                {"rule": problem.rule, "field": problem.field, "reason": problem.reason},
            )

    def name_taken(self, row: NodeRow | None, msg: RegisterV1) -> str | None:
        """A Ready node of another cluster already has this name (None: free)."""
        if row is None or row.cluster == msg.cluster:
            return None
        live = self.nodes.get(row.name)
        if live is not None and live.status == "Ready":
            return f"node name {row.name!r} is already used in cluster {row.cluster!r}"
        return None

    def register(self, s: AsyncSession, row: NodeRow | None, msg: RegisterV1) -> tuple[NodeRow, str | None]:
        """Write a registration into the node's row (new if None) and the live view; returns the
        row and the boot id it had before (None: a new node)."""
        now = time.time()
        name = msg.node
        previous_boot = row.boot_id if row is not None else None
        telemetry = telemetry_dict(msg.telemetry)
        power_source = msg.telemetry.power_source if msg.telemetry else "unknown"
        battery = msg.telemetry.battery_percent if msg.telemetry else None
        if row is None:
            row = NodeRow(name=name, registered_at=now)
            s.add(row)
            Store.add_event(s, "NodeRegistered", "node", name, f"cluster {msg.cluster}")
        elif previous_boot != msg.boot_id:
            Store.add_event(s, "NodeRestarted", "node", name, "agent restarted (new boot id)")
        if row.status != "Ready" and previous_boot is not None:
            Store.add_event(s, "NodeReady", "node", name, "registered again")
        row.cluster = msg.cluster
        row.status = "Ready"
        row.node_type = msg.node_type
        row.boot_id = msg.boot_id
        row.agent_version = msg.agent_version
        row.labels = dict(msg.labels)
        row.isolation = dict(msg.isolation)
        row.resources = {
            "cpu": msg.resources.cpu,
            "memory": msg.resources.memory,
            "gpus": [asdict(g) for g in msg.resources.gpus],
            "dpu": msg.resources.dpu,
            "ephemeral_storage": msg.resources.ephemeral_storage,
        }
        row.telemetry = telemetry
        row.power_source = power_source
        row.battery_percent = battery
        row.heartbeat_interval_s = msg.heartbeat_interval_s
        row.last_heartbeat_at = now
        row.updated_at = now
        self.nodes[name] = NodeLive(
            name=name,
            cluster=msg.cluster,
            status="Ready",
            boot_id=msg.boot_id,
            lease_s=msg.heartbeat_interval_s * self.lease_missed_heartbeats,
            last_seen=asyncio.get_running_loop().time(),
            telemetry=telemetry,
            power_source=power_source,
            battery_percent=battery,
            last_heartbeat_at=now,
        )
        return row, previous_boot

    @staticmethod
    def heard(live: NodeLive, msg: HeartbeatV1) -> bool:
        """Note a heartbeat of a known node; True when its power source or battery changed."""
        live.last_seen = asyncio.get_running_loop().time()
        live.last_heartbeat_at = time.time()
        live.telemetry = telemetry_dict(msg.telemetry)
        changed = (live.power_source, live.battery_percent) != (
            msg.telemetry.power_source,
            msg.telemetry.battery_percent,
        )
        live.power_source = msg.telemetry.power_source
        live.battery_percent = msg.telemetry.battery_percent
        live.dirty = True
        return changed

    async def set_status(self, s: AsyncSession, live: NodeLive, status: str, why: str) -> None:
        live.status = status
        row = await s.get(NodeRow, live.name)
        if row is not None:
            row.status = status
            row.updated_at = time.time()
        Store.add_event(s, f"Node{status}", "node", live.name, why)
        await self.refresh_clusters(s)

    async def refresh_clusters(self, s: AsyncSession) -> None:
        """A cluster is Available with a Ready node, Unavailable with none, Unknown when empty."""
        for cluster in self.federation.clusters:
            members = [n for n in self.nodes.values() if n.cluster == cluster.name]
            status = "Unknown" if not members else "Available"
            if members and all(n.status != "Ready" for n in members):
                status = "Unavailable"
            row = await s.get(ClusterRow, cluster.name)
            if row is not None and row.status != status:
                row.status = status
                row.updated_at = time.time()
                Store.add_event(s, f"Cluster{status}", "cluster", cluster.name)

    async def flush(self, store: Store) -> None:
        """Write what heartbeats changed (telemetry, power) into the node rows."""
        dirty = [n for n in self.nodes.values() if n.dirty]
        if not dirty:
            return
        async with store.session() as s:
            for live in dirty:
                row = await s.get(NodeRow, live.name)
                if row is None:
                    continue
                row.telemetry = live.telemetry
                row.power_source = live.power_source
                row.battery_percent = live.battery_percent
                row.last_heartbeat_at = live.last_heartbeat_at
                row.updated_at = time.time()
                live.dirty = False


def placement_node(row: NodeRow, federation: FederationConfig) -> PlacementNode:
    """What the placer needs of a node, from its row."""
    cluster = federation.cluster(row.cluster)
    resources = row.resources or {}
    gpus = resources.get("gpus") or []
    return PlacementNode(
        name=row.name,
        cluster=row.cluster,
        region=cluster.region if cluster else "",
        cpu=float(resources.get("cpu", 0.0)),
        memory=int(resources.get("memory", 0)),
        gpus=len(gpus),
        gpu_memory_bytes=[int(g.get("memory_total_bytes", 0)) for g in gpus],
        dpu=int(resources.get("dpu", 0)),
        ephemeral_storage=int(resources.get("ephemeral_storage", 0)),
        labels=dict(row.labels or {}),
        ready=row.status == "Ready",
        node_type=row.node_type,
        power_source=row.power_source,
        battery_percent=row.battery_percent,
    )


def telemetry_dict(telemetry: Telemetry | None) -> dict[str, Any]:
    return {} if telemetry is None else asdict(telemetry)
