"""Level one of cross-cluster placement over arrays: :func:`~.placement.plan_clusters`'s plan,
computed column-wise over the federation's clusters.

The same rules in the same order (eligibility, room, the weighted min-max ranking, the spread over
regions, the division by room or weight with the leftovers to the best-ranked clusters), with the
per-cluster loops of the reference replaced by numpy over one row per cluster, so that a decision
at 100 clusters does not build 100 aggregates and their score dictionaries
(``bench/federation_scale.py``). ``tests/unit/federation/test_plan_arrays.py`` checks it against
the reference on random federations. The federation's static columns (regions, cost, carbon,
weights) are kept between decisions while its clusters are the same.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from edgeplane_contract.resources import MIG_PROFILES, ResourceRequest

from controlplane.federation.config import FederationConfig
from controlplane.federation.placement import ClusterAggregate, ClusterPlan, spread_picks

__all__ = ["ClusterColumns", "FederationColumns", "plan_clusters_columns"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNBOUNDED = 1_000_000  # room_for's figure when nothing bounds the count
UNKNOWN = -1  # an optional figure not known for a cluster (the aggregates' None)


@dataclass(slots=True)
class ClusterColumns:
    """Per cluster, in the federation's order: what ``ClusterAggregate`` holds (``UNKNOWN`` for
    its optional figures where not known)."""

    ready_nodes: IntArray
    cpu_free: FloatArray
    memory_free: FloatArray
    gpus_free: IntArray
    mig_compute_free: IntArray
    dpus_free: IntArray
    mig_largest_free: IntArray
    mig_hosts: IntArray
    replica_slots: IntArray


class FederationColumns:
    """A federation's static per-cluster columns, in its order."""

    def __init__(self, federation: FederationConfig) -> None:
        clusters = federation.clusters
        self.key = _key(federation)
        self.names = [c.name for c in clusters]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.regions = [c.region for c in clusters]
        self.cost = np.array([c.cost_per_core_hour for c in clusters], dtype=np.float64)
        self.carbon = np.array([c.carbon_g_per_kwh for c in clusters], dtype=np.float64)
        self.weight = np.array([c.weight for c in clusters], dtype=np.float64)
        order = sorted(range(len(clusters)), key=self.names.__getitem__)
        self.name_rank = np.empty(len(clusters), dtype=np.int64)
        self.name_rank[order] = np.arange(len(clusters))
        self._latency: dict[str, FloatArray] = {}
        self.federation = federation

    def latency_from(self, origin: str | None) -> FloatArray:
        if not origin:  # as the reference: no origin (or an empty one), no latency
            return np.zeros(len(self.names))
        kept = self._latency.get(origin)
        if kept is None:
            between = self.federation.latency_between
            kept = self._latency[origin] = np.array([between(origin, r) for r in self.regions])
        return kept

    def mask_of(self, names: Collection[str], regions: bool = False) -> BoolArray:
        """The clusters named (or in the regions named)."""
        wanted = set(names)
        keys = self.regions if regions else self.names
        return np.fromiter((k in wanted for k in keys), dtype=np.bool_, count=len(keys))


def _key(federation: FederationConfig) -> tuple[object, ...]:
    clusters = [
        (c.name, c.region, c.cost_per_core_hour, c.carbon_g_per_kwh, c.weight) for c in federation.clusters
    ]
    return (*clusters, tuple(sorted(federation.latency_ms.items())))


_kept: dict[int, FederationColumns] = {}


def federation_columns(federation: FederationConfig) -> FederationColumns:
    """The federation's columns, built once while its clusters stay the same."""
    kept = _kept.get(id(federation))
    if kept is None or kept.federation is not federation or kept.key != _key(federation):
        if len(_kept) > 16:  # a process that builds many federations (tests): keep a few
            _kept.clear()
        kept = _kept[id(federation)] = FederationColumns(federation)
    return kept


def _room(res: ResourceRequest, c: ClusterColumns) -> IntArray:
    """``ClusterAggregate.room_for`` per cluster."""
    n = len(c.ready_nodes)
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.full(n, np.inf)
        if res.cpu > 0:
            room = np.minimum(room, c.cpu_free / res.cpu)
        if res.memory > 0:
            room = np.minimum(room, c.memory_free / res.memory)
        if res.gpu:
            room = np.minimum(room, c.gpus_free / res.gpu)
        zero = c.ready_nodes == 0
        if res.mig:
            largest = max(MIG_PROFILES[p][0] for p in res.mig)
            zero |= (c.mig_largest_free != UNKNOWN) & (largest > c.mig_largest_free)
            room = np.minimum(room, c.mig_compute_free / max(1, sum(MIG_PROFILES[p][0] for p in res.mig)))
            room = np.where(c.mig_hosts != UNKNOWN, np.minimum(room, c.mig_hosts), room)
        if res.dpu:
            room = np.minimum(room, c.dpus_free / res.dpu)
        room = np.where(c.replica_slots != UNKNOWN, np.minimum(room, c.replica_slots), room)
    # int() truncates toward zero, as the reference's int(room).
    out = np.where(np.isfinite(room), np.trunc(np.where(np.isfinite(room), room, 0.0)), UNBOUNDED)
    return np.where(zero, 0, out).astype(np.int64)


def _normalised(values: FloatArray) -> FloatArray:
    low, high = values.min(), values.max()
    if high - low <= 1e-12:
        return np.zeros_like(values)
    result: FloatArray = (values - low) / (high - low)
    return result


def _divide(total: int, shares: FloatArray, caps: IntArray) -> IntArray:
    """The reference's ``_divide`` over arrays already in ranking order."""
    n = len(shares)
    counts = np.zeros(n, dtype=np.int64)
    remaining = total
    active = (caps > 0) & (shares > 0)
    while remaining > 0 and active.any():
        weight = float(sum(shares[active].tolist()))
        exact = remaining * shares / weight
        given = np.where(active, np.minimum(np.floor(exact).astype(np.int64), caps - counts), 0)
        left = remaining - int(given.sum())
        if left > 0:
            spare = np.flatnonzero(active & (counts + given < caps))[:left]
            given[spare] += 1
        handed = int(given.sum())
        if handed == 0:
            break
        counts += given
        remaining -= handed
        active &= counts < caps
    if remaining > 0 and n:
        counts += remaining // n
        counts[: remaining % n] += 1
    return counts


def plan_clusters_columns(
    *,
    resources: ResourceRequest,
    replicas: int,
    federation: FederationConfig,
    columns: ClusterColumns,
    clusters: Collection[str] = (),
    regions: Collection[str] = (),
    avoid_clusters: Collection[str] = (),
    avoid_regions: Collection[str] = (),
    unavailable: Collection[str] = (),
    origin_region: str | None = None,
    scores: bool = True,
    fed: FederationColumns | None = None,
) -> ClusterPlan:
    """:func:`~.placement.plan_clusters` over ``columns`` (``scores``: fill the plan's per-cluster
    score table, which only explanations read; ``fed``: the federation's columns, where the
    caller holds them)."""
    fed = fed if fed is not None else federation_columns(federation)
    policy = federation.placement
    eligible = columns.ready_nodes > 0
    if clusters:
        eligible &= fed.mask_of(clusters)
    if regions:
        eligible &= fed.mask_of(regions, regions=True)
    if avoid_clusters:
        eligible &= ~fed.mask_of(avoid_clusters)
    if avoid_regions:
        eligible &= ~fed.mask_of(avoid_regions, regions=True)
    if unavailable:
        eligible &= ~fed.mask_of(unavailable)
    if not eligible.any():
        return ClusterPlan(reason="no eligible cluster (affinity, availability or no ready nodes)")
    room = _room(resources, columns)
    fitting = np.flatnonzero(eligible & (room > 0))
    if not len(fitting):
        fitting = np.flatnonzero(eligible)
    latency = fed.latency_from(origin_region)[fitting]
    cost, carbon = fed.cost[fitting], fed.carbon[fitting]
    total = (
        policy.latency_weight * _normalised(latency)
        + policy.cost_weight * _normalised(cost)
        + policy.carbon_weight * _normalised(carbon)
    )
    fit_room = room[fitting]
    order = np.lexsort((fed.name_rank[fitting], -fit_room, total))
    ranked = fitting[order]
    names = fed.names
    ranking = [names[i] for i in ranked.tolist()]
    table: dict[str, dict[str, float]] = {}
    if scores:
        for i, c in enumerate(fitting.tolist()):
            table[names[c]] = {
                "latency_ms": float(latency[i]),
                "cost_per_core_hour": float(cost[i]),
                "carbon_g_per_kwh": float(carbon[i]),
                "room": float(fit_room[i]),
                "score": float(total[i]),
            }
    counts = np.zeros(len(ranked), dtype=np.int64)
    spread = min(policy.spread_min_regions, replicas)
    if spread > 1:
        picks = spread_picks([fed.regions[c] for c in ranked.tolist()], spread, policy.spread_min_regions)
        if isinstance(picks, str):
            return ClusterPlan(ranking=ranking, scores=table, reason=picks)
        counts[picks] += 1
    rest = replicas - int(counts.sum())
    ranked_room = room[ranked]
    if policy.divide == "weights":
        shares = fed.weight[ranked]
    else:
        shares = np.maximum(ranked_room - counts, 0).astype(np.float64)
    caps = np.maximum(ranked_room - counts, 0)
    counts += _divide(rest, shares, caps)
    assignments = [ranking[k] for k in np.repeat(np.arange(len(ranked)), counts).tolist()]
    return ClusterPlan(assignments=assignments, ranking=ranking, scores=table)


def columns_of(federation: FederationConfig, aggregates: Mapping[str, ClusterAggregate]) -> ClusterColumns:
    """:class:`ClusterColumns` from ``ClusterAggregate`` objects (a cluster without one: no
    ready nodes); for tests and callers that hold aggregates."""
    found = [aggregates.get(name) for name in federation_columns(federation).names]

    def ints(attr: str, default: int) -> IntArray:
        values = [getattr(a, attr) if a is not None else default for a in found]
        return np.array([UNKNOWN if v is None else v for v in values], dtype=np.int64)

    def floats(attr: str) -> FloatArray:
        return np.array([getattr(a, attr) if a is not None else 0.0 for a in found], dtype=np.float64)

    return ClusterColumns(
        ready_nodes=ints("ready_nodes", 0),
        cpu_free=floats("cpu_free"),
        memory_free=floats("memory_free"),
        gpus_free=ints("gpus_free", 0),
        mig_compute_free=ints("mig_compute_free", 0),
        dpus_free=ints("dpus_free", 0),
        mig_largest_free=ints("mig_largest_free", UNKNOWN),
        mig_hosts=ints("mig_hosts", UNKNOWN),
        replica_slots=ints("replica_slots", UNKNOWN),
    )
