"""What the hub knows of its nodes between store writes, and the narrow views of the hub that its
parts receive instead of the whole ``Hub`` (the bid round, the function service).

Its own package, below ``hub``, ``serverless`` and ``observe``: it imports none of them, so the
parts that take these views do not import ``hub.service`` (the composition that wires them),
nothing cycles, and those packages tie one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from controlplane.bus.hub_bus import HubBus
from controlplane.federation.config import FederationConfig
from controlplane.scheduling.model import Feasibility, WorkloadRequest
from controlplane.store.store import Store

__all__ = ["FunctionHost", "NodeDirectory", "NodeLive"]


@dataclass(slots=True)
class NodeLive:
    """What the hub tracks about a node between store writes."""

    name: str
    cluster: str
    status: str
    boot_id: str
    lease_s: float
    last_seen: float
    telemetry: dict[str, Any] = field(default_factory=dict)
    power_source: str = "unknown"
    battery_percent: float | None = None
    last_heartbeat_at: float = 0.0
    node_type: str = "edge"  # its class (resources.NODE_TYPES): a canary judges each on its own too
    dirty: bool = False
    # NotReady, its placements held (not Lost) for hold_s beyond its lease: the autonomy window in a
    # partition, else the cluster's eviction grace.
    held: bool = False
    hold_s: float = 0.0
    # Added to the lease until the first heartbeat after an admission (Kubernetes'
    # node-startup-grace-period): in a re-registration storm the answer and the first heartbeat
    # both cross a swamped hub and agent.
    startup_s: float = 0.0
    # The local policy version the agent decides with, as its heartbeats say (None: shipped).
    policy_version: int | None = None

    @property
    def lease_now(self) -> float:
        """The silence this node is allowed now: its lease, plus the startup grace before its
        first heartbeat."""
        return self.lease_s + self.startup_s


class NodeDirectory(Protocol):
    """The live nodes and the bus to reach them: what the bid round needs."""

    @property
    def nodes(self) -> dict[str, NodeLive]: ...

    @property
    def bus(self) -> HubBus: ...


class FunctionHost(NodeDirectory, Protocol):
    """What the function service needs of the hub: the nodes and bus, the store, the federation
    (a cluster's eviction grace) and the placement engine's answer to where an instance fits."""

    @property
    def store(self) -> Store: ...

    @property
    def federation(self) -> FederationConfig: ...

    def function_nodes(self, request: WorkloadRequest) -> Feasibility: ...
