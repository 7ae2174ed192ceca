"""Node leases as pure rules: who is silent, whether it looks like a partition, how long work is held.

"The node is gone" and "I can't hear anyone" differ: silence only counts while the hub's own NATS
connection for the node's cluster is up, and from when it came back (or from when the hub itself
woke from a stall of its own loop, ``hub.stall``). When a large share of a
cluster goes silent at once it is a partition (Kubernetes' zone-disruption rule): the nodes go
NotReady but their work is held for the cluster's autonomy window; a single silent node's work is
held for the cluster's eviction grace. The hub applies these rules (``hub.service``);
``tests/unit/spine/test_lease_rules.py`` tables them.
"""

from __future__ import annotations

import heapq
import itertools
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.federation.config import ClusterConfig
from controlplane.fleet.nodes import NodeLive

__all__ = [
    "STALL_SHARE",
    "IntakeLag",
    "LeaseClock",
    "LeaseScan",
    "PartitionFinding",
    "hearing_after",
    "hold_for",
    "hold_over",
    "partitions",
    "scan_leases",
    "stall_matters",
]

# When the hub began hearing a cluster's bus (None: its connection is down now).
HearingSince = Callable[[str], float | None]

# A stall of the hub's own loop longer than this share of the shortest lease gives every node a
# fresh lease: the silence it caused is the hub's, not the nodes'.
STALL_SHARE = 0.5


@dataclass(slots=True)
class LeaseScan:
    """Ready nodes silent beyond their lease, and the clusters the hub cannot hear right now."""

    expired: list[NodeLive] = field(default_factory=list)
    deaf: set[str] = field(default_factory=set)


def scan_leases(
    nodes: Iterable[NodeLive], now: float, hearing_since: HearingSince, slack_s: float = 0.0
) -> LeaseScan:
    """Silence counts from the later of the node's last word and the hub's reconnect; ``slack_s``
    (the hub's own intake lag, :class:`IntakeLag`) is added to every lease."""
    scan = LeaseScan()
    for live in nodes:
        if live.status != "Ready":
            continue
        since = hearing_since(live.cluster)
        if since is None:
            scan.deaf.add(live.cluster)
        elif now - max(live.last_seen, since) > live.lease_now + slack_s:
            scan.expired.append(live)
    return scan


class LeaseClock:
    """Ready nodes by the earliest moment their lease could run out, for ``scan_leases`` at the
    cost of the nodes whose moment came rather than of the whole fleet.

    A heap with one live entry per watched node; a heartbeat does not touch it (the node's
    ``last_seen`` only moves its expiry later). :meth:`due` pops the entries due by now and applies
    ``scan_leases``' rule to each: silent beyond its lease -> expired (no longer watched), else
    pushed back at its new earliest expiry. :meth:`arm` (re)starts watching a node whose expiry may
    have moved earlier: a registration (a new lease), a return to Ready, the hub's start.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._entry: dict[str, int] = {}  # node -> the token of its live entry (others are stale)
        self._tokens = itertools.count()

    def __len__(self) -> int:
        return len(self._entry)

    def arm(self, live: NodeLive) -> None:
        """Watch ``live`` from its last word plus its lease (replaces an earlier entry)."""
        self._push(live.name, live.last_seen + live.lease_now)
        if len(self._heap) > 4 * len(self._entry) + 64:  # stale entries of re-armed nodes
            self._heap = [e for e in self._heap if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def _push(self, name: str, deadline: float) -> None:
        token = next(self._tokens)
        self._entry[name] = token
        heapq.heappush(self._heap, (deadline, token, name))

    def due(self, nodes: Mapping[str, NodeLive], now: float, hearing_since: HearingSince) -> LeaseScan:
        """``scan_leases`` over the watched nodes whose earliest expiry is before ``now``."""
        scan = LeaseScan()
        heap = self._heap
        while heap and heap[0][0] < now:
            _, token, name = heapq.heappop(heap)
            if self._entry.get(name) != token:
                continue  # replaced by a later arm()
            live = nodes.get(name)
            if live is None or live.status != "Ready":
                del self._entry[name]  # armed again when it is Ready again
                continue
            since = hearing_since(live.cluster)
            if since is None:
                scan.deaf.add(live.cluster)
                # Nothing expires while the hub is deaf; once it hears again, a full lease.
                deadline = now + live.lease_now
            elif now - max(live.last_seen, since) > live.lease_now:
                scan.expired.append(live)
                del self._entry[name]
                continue
            else:
                deadline = max(live.last_seen, since) + live.lease_now
            # max(): an entry pushed back never comes due again in this same pass.
            self._push(name, max(deadline, now))
        return scan


@dataclass(frozen=True, slots=True)
class PartitionFinding:
    cluster: str
    silent: int
    members: int
    window_s: float


def partitions(
    expired: list[NodeLive],
    nodes: Iterable[NodeLive],
    now: float,
    cluster_config: Callable[[str], ClusterConfig | None],
) -> list[PartitionFinding]:
    """The clusters where so large a share of the nodes is silent at once that it looks like a
    partition rather than failed nodes: 3 or more members (nodes heard within the autonomy window;
    long-dead ones do not count) and at least ``partition_share`` of them silent."""
    everyone = list(nodes)
    found = []
    for cluster in sorted({n.cluster for n in expired}):
        config = cluster_config(cluster)
        if config is None:
            continue
        window = config.autonomy_window_s
        members = [
            n
            for n in everyone
            if n.cluster == cluster and (n.status == "Ready" or now - n.last_seen <= window + n.lease_now)
        ]
        silent = [n for n in members if n.status != "Ready" or n in expired]
        if len(members) >= 3 and len(silent) >= config.partition_share * len(members):
            found.append(PartitionFinding(cluster, len(silent), len(members), window))
    return found


def hold_for(config: ClusterConfig | None, *, partitioned: bool) -> float | None:
    """How long beyond its lease a silent node's work is held before it is placed again: the
    autonomy window in a partition, else the eviction grace (Kubernetes' not-ready toleration: a
    node back within it keeps its work and reports what finished); None: placed again at once."""
    if config is None:
        return None
    if partitioned:
        return config.autonomy_window_s
    return config.eviction_grace_s if config.eviction_grace_s > 0 else None


def hold_over(live: NodeLive, now: float, hearing_since: HearingSince) -> bool:
    """True when a held node has been silent beyond its lease and its hold; never while the hub
    itself cannot hear its cluster."""
    since = hearing_since(live.cluster)
    if since is None:
        return False
    return now - max(live.last_seen, since) > live.lease_now + live.hold_s


def stall_matters(stall_s: float, nodes: Iterable[NodeLive]) -> bool:
    """True when the hub's own stall of ``stall_s`` could make a node look silent: longer than
    ``STALL_SHARE`` of the shortest lease of the nodes it judges (Ready or held)."""
    leases = [n.lease_s for n in nodes if n.status == "Ready" or n.held]
    return bool(leases) and stall_s > STALL_SHARE * min(leases)


def hearing_after(hearing_since: HearingSince, resumed_at: float) -> HearingSince:
    """``hearing_since``, but never earlier than ``resumed_at`` (when the hub came back from a stall
    of its own): silence counts from there, as from a reconnect."""

    def since(cluster: str) -> float | None:
        heard = hearing_since(cluster)
        return None if heard is None else max(heard, resumed_at)

    return since


class IntakeLag:
    """How far behind its intake the hub is: the median, over the last heartbeats it handled, of
    handled-at minus sent-at. A backlog anywhere on the way (the hub's socket, the server, the
    subscription's queue) shows in it; one node with a skewed clock does not move a median.
    Clamped to ``[0, cap_s]``: a fleet whose clocks all run slow cannot hold every lease open."""

    def __init__(self, samples: int = 256, cap_s: float = 10.0) -> None:
        self._lags: deque[float] = deque(maxlen=samples)
        self.cap_s = cap_s

    def observe(self, lag_s: float) -> None:
        self._lags.append(lag_s)

    def seconds(self) -> float:
        if not self._lags:
            return 0.0
        return min(self.cap_s, max(0.0, statistics.median(self._lags)))
