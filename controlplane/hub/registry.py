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
from typing import Any, cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.messages import HeartbeatV1, RegisterV1, Telemetry, valid_token

from controlplane.bus.hub_bus import HubBus
from controlplane.federation.config import FederationConfig
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.leases import LeaseClock
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
# Heartbeats fold into the live view; their telemetry reaches the node rows at most this often
# (one batched UPDATE), or at the next round when a node's power source or battery changed.
FLUSH_EVERY_S = 1.0
# A large fleet's rows are written less often: at most about this many rows a second.
FLUSH_ROWS_PER_S = 2000
# Rows written per transaction (the event loop runs between them).
FLUSH_CHUNK = 1000

_NODES = cast(Table, NodeRow.__table__)
# One statement for the whole batch (executemany): the ORM's unit of work per row is pure overhead.
_FLUSH_HEARTBEATS = (
    update(_NODES)
    .where(_NODES.c.name == bindparam("b_name"))
    .values(
        telemetry=bindparam("b_telemetry"),
        power_source=bindparam("b_power_source"),
        battery_percent=bindparam("b_battery_percent"),
        last_heartbeat_at=bindparam("b_last_heartbeat_at"),
        updated_at=bindparam("b_updated_at"),
    )
)


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
        # The Ready nodes by when their lease could run out (``leases.LeaseClock``).
        self.leases = LeaseClock()
        # Clusters of every node in ``nodes`` (a node is only added by load() and register()).
        self.clusters_seen: set[str] = set()
        # The shortest lease any node was ever given: a lower bound for ``leases.stall_matters``.
        self.shortest_lease_s = float("inf")
        self._dirty: set[str] = set()  # nodes heard since the last flush
        self._urgent = False  # a power change waits for the next round, not FLUSH_EVERY_S
        self._flushed_at = float("-inf")
        # A Ready node per cluster, the first one tried when a node of the cluster goes NotReady.
        self._ready_hint: dict[str, str] = {}
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
            self._track(NodeLive(
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
                node_type=node.node_type,
            ))  # fmt: skip
        return rows

    def _track(self, live: NodeLive) -> None:
        """``live`` replaces what the registry knew of its node; its lease is watched if Ready."""
        self.nodes[live.name] = live
        self.clusters_seen.add(live.cluster)
        self.shortest_lease_s = min(self.shortest_lease_s, live.lease_s)
        if live.status == "Ready":
            self.leases.arm(live)

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
        lease_s = msg.heartbeat_interval_s * self.lease_missed_heartbeats
        self._track(
            NodeLive(
                name=name,
                cluster=msg.cluster,
                status="Ready",
                boot_id=msg.boot_id,
                lease_s=lease_s,
                startup_s=lease_s,  # twice the lease until its first heartbeat (NodeLive.startup_s)
                last_seen=asyncio.get_running_loop().time(),
                telemetry=telemetry,
                power_source=power_source,
                battery_percent=battery,
                last_heartbeat_at=now,
                node_type=msg.node_type,
            )
        )
        return row, previous_boot

    def heard(self, live: NodeLive, msg: HeartbeatV1, now: float, wall: float) -> bool:
        """Note a heartbeat of a known node (``now``: loop time, ``wall``: time.time()), in memory
        only (``flush`` writes it); True when its power source or battery changed."""
        live.last_seen = now
        live.last_heartbeat_at = wall
        if live.startup_s:  # its first heartbeat since the admission: the plain lease from now on
            live.startup_s = 0.0
            self.leases.arm(live)
        telemetry = msg.telemetry
        live.telemetry = telemetry_dict(telemetry)
        changed = (
            live.power_source != telemetry.power_source or live.battery_percent != telemetry.battery_percent
        )
        if changed:
            live.power_source = telemetry.power_source
            live.battery_percent = telemetry.battery_percent
            self._urgent = True
        live.dirty = True
        self._dirty.add(live.name)
        return changed

    async def set_status(self, s: AsyncSession, live: NodeLive, status: str, why: str) -> None:
        live.status = status
        if status == "Ready":
            self.leases.arm(live)
        row = await s.get(NodeRow, live.name)
        if row is not None:
            row.status = status
            row.updated_at = time.time()
        Store.add_event(s, f"Node{status}", "node", live.name, why)
        # Only the node's own cluster can change: a pass over every node of every cluster per
        # status change made a fleet's burst of expiries (or of returns) quadratic.
        if status == "Ready":
            await self.cluster_has_ready_node(s, live.cluster)
        else:
            await self._refresh_cluster(s, live.cluster)

    async def _refresh_cluster(self, s: AsyncSession, cluster: str) -> None:
        """``refresh_clusters`` for one cluster that has a member (the node that changed): Available
        while one of its nodes is Ready, found by trying the one found last time first."""
        hint = self.nodes.get(self._ready_hint.get(cluster, ""))
        if hint is None or hint.cluster != cluster or hint.status != "Ready":
            hint = next(
                (n for n in self.nodes.values() if n.cluster == cluster and n.status == "Ready"), None
            )
            if hint is not None:
                self._ready_hint[cluster] = hint.name
        status = "Available" if hint is not None else "Unavailable"
        row = await s.get(ClusterRow, cluster)
        if row is not None and row.status != status:
            row.status = status
            row.updated_at = time.time()
            Store.add_event(s, f"Cluster{status}", "cluster", cluster)

    async def cluster_has_ready_node(self, s: AsyncSession, cluster: str) -> None:
        """What ``refresh_clusters`` concludes once a node of ``cluster`` is Ready (it is Available,
        whatever the others are) without a pass over every node: for registrations."""
        row = await s.get(ClusterRow, cluster)
        if row is not None and row.status != "Available":
            row.status = "Available"
            row.updated_at = time.time()
            Store.add_event(s, "ClusterAvailable", "cluster", cluster)

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

    async def flush(self, store: Store, *, force: bool = False) -> None:
        """Write what heartbeats changed (telemetry, power) into the node rows: one batched UPDATE,
        at most every ``FLUSH_EVERY_S`` unless a power source or battery changed (or ``force``)."""
        if not self._dirty:
            return
        mono = time.monotonic()
        every_s = max(FLUSH_EVERY_S, len(self._dirty) / FLUSH_ROWS_PER_S)
        if not (force or self._urgent or mono - self._flushed_at >= every_s):
            return
        # Taken before the write: heartbeats heard while it runs belong to the next batch.
        names, self._dirty = self._dirty, set()
        urgent, self._urgent = self._urgent, False
        batch = [live for name in names if (live := self.nodes.get(name)) is not None and live.dirty]
        now = time.time()
        params = [
            {
                "b_name": live.name,
                "b_telemetry": live.telemetry,
                "b_power_source": live.power_source,
                "b_battery_percent": live.battery_percent,
                "b_last_heartbeat_at": live.last_heartbeat_at,
                "b_updated_at": now,
            }
            for live in batch
        ]
        for live in batch:
            live.dirty = False
        written = 0
        try:
            # In transactions of FLUSH_CHUNK rows: a fleet's 10,000 rows in one statement held the
            # event loop (the rows' parameters are made on it) for up to half a second, and the
            # heartbeats waiting meanwhile looked late.
            for start in range(0, len(params), FLUSH_CHUNK):
                async with store.session() as s:
                    await s.execute(_FLUSH_HEARTBEATS, params[start : start + FLUSH_CHUNK])
                written = min(len(params), start + FLUSH_CHUNK)
        except BaseException:  # not written: dirty again, for the next round
            unwritten = batch[written:]
            for live in unwritten:
                live.dirty = True
            self._dirty |= {live.name for live in unwritten}
            self._urgent = self._urgent or urgent
            raise
        self._flushed_at = mono


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
    """``asdict(telemetry)``, without its deep copy of every field (a heartbeat's hot path)."""
    if telemetry is None:
        return {}
    return {
        "cpu_percent": telemetry.cpu_percent,
        "memory_used_bytes": telemetry.memory_used_bytes,
        "memory_total_bytes": telemetry.memory_total_bytes,
        "load_1m": telemetry.load_1m,
        "power_source": telemetry.power_source,
        "battery_percent": telemetry.battery_percent,
        "power_w": telemetry.power_w,
        "power_method": telemetry.power_method,
        "gpus": [asdict(g) for g in telemetry.gpus],
        "weights": list(telemetry.weights),
        "policy": telemetry.policy,
    }
