"""Cross-cluster placement, level one: which clusters get a workload's replicas.

Level two (nodes inside a cluster) is the scheduling framework. Here, from per-cluster
aggregates (free capacity of ready nodes) and the federation config:

1. Eligible clusters: in the workload's cluster/region affinity, not anti-affine, not
   unavailable, with room for at least one replica (an aggregate upper bound).
2. Rank them: each of inter-region latency (from the workload's data region), cost per core hour
   and grid carbon intensity is min-max normalised over the eligible clusters and weighted by
   ``placement.{latency,cost,carbon}_weight``; lower is better.
3. Spread: if ``placement.spread_min_regions`` is N, the first min(N, replicas) replicas go to
   the best cluster of each of the N best regions.
4. Divide the rest by ``placement.divide``: proportional to how many replicas each cluster can
   hold (``capacity``) or to cluster ``weight`` (``weights``), capped by room; the replicas left
   after rounding down go to the best-ranked clusters.

Failover re-plans a workload's replicas with the unavailable clusters excluded.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edgeplane_contract.resources import MIG_PROFILES, ResourceRequest

from controlplane.federation.config import FederationConfig

__all__ = ["ClusterAggregate", "ClusterPlan", "plan_clusters", "spread_picks"]


@dataclass(slots=True)
class ClusterAggregate:
    """Free capacity of a cluster's ready nodes."""

    name: str
    region: str
    ready_nodes: int = 0
    cpu_free: float = 0.0
    memory_free: float = 0.0
    gpus_free: int = 0
    mig_compute_free: int = 0
    dpus_free: int = 0
    cpu_capacity: float = 0.0
    mig_largest_free: int | None = None
    """The most compute slices free on any one MIG GPU (None: not known, no bound from it)."""
    mig_hosts: int | None = None
    """MIG GPUs with a free legal slot for the largest instance of the request being planned
    (set per request by the scheduler; None: not known, no bound from it)."""
    replica_slots: int | None = None
    """How many replicas of the request being planned its ready nodes hold by CPU and memory,
    node by node (set per request by the scheduler; None: not known, no bound from it)."""

    def room_for(self, res: ResourceRequest) -> int:
        """Upper bound on how many replicas of ``res`` fit (the sums ignore per-node fragmentation;
        ``replica_slots``, where known, counts CPU and memory node by node)."""
        if self.ready_nodes == 0:
            return 0
        bounds = [self.cpu_free / res.cpu if res.cpu > 0 else math.inf]
        bounds.append(self.memory_free / res.memory if res.memory > 0 else math.inf)
        if res.gpu:
            bounds.append(self.gpus_free / res.gpu)
        if res.mig:
            if (
                self.mig_largest_free is not None
                and max(MIG_PROFILES[p][0] for p in res.mig) > self.mig_largest_free
            ):
                return 0  # no single GPU has the slices for the largest instance asked
            bounds.append(self.mig_compute_free / max(1, sum(MIG_PROFILES[p][0] for p in res.mig)))
            if self.mig_hosts is not None:
                bounds.append(self.mig_hosts)
        if res.dpu:
            bounds.append(self.dpus_free / res.dpu)
        if self.replica_slots is not None:  # free CPU on one node, memory on another: none fits
            bounds.append(self.replica_slots)
        room = min(bounds)
        return int(room) if math.isfinite(room) else 1_000_000


@dataclass(slots=True)
class ClusterPlan:
    """One cluster per replica (in replica order), the ranking used, and why."""

    assignments: list[str] = field(default_factory=list)
    ranking: list[str] = field(default_factory=list)
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and bool(self.assignments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "assignments": list(self.assignments),
            "ranking": list(self.ranking),
            "scores": self.scores,
            "reason": self.reason,
        }


def _normalised(values: dict[str, float]) -> dict[str, float]:
    low, high = min(values.values()), max(values.values())
    if high - low <= 1e-12:
        return {k: 0.0 for k in values}
    return {k: (v - low) / (high - low) for k, v in values.items()}


def _divide(total: int, shares: dict[str, float], caps: dict[str, int], order: list[str]) -> dict[str, int]:
    counts = {name: 0 for name in shares}
    rank = {name: i for i, name in enumerate(order)}
    remaining = total
    active = {n for n in shares if caps[n] > 0 and shares[n] > 0}
    # Repeat because capping one cluster hands its share to the others.
    while remaining > 0 and active:
        weight = sum(shares[n] for n in active)
        exact = {n: remaining * shares[n] / weight for n in active}
        given = {n: min(math.floor(exact[n]), caps[n] - counts[n]) for n in active}
        left = remaining - sum(given.values())
        # Leftovers go to the best-ranked clusters (not the largest fractions): a workload of
        # one replica lands in the best cluster, e.g. the one nearest its data.
        for n in sorted(active, key=rank.__getitem__):
            if left <= 0:
                break
            if counts[n] + given[n] < caps[n]:
                given[n] += 1
                left -= 1
        if sum(given.values()) == 0:
            break
        for n, g in given.items():
            counts[n] += g
        remaining -= sum(given.values())
        active = {n for n in active if counts[n] < caps[n]}
    if remaining > 0 and order:
        # No room anywhere for the rest: give them to the best clusters; the node level will
        # queue them until capacity frees.
        for i in range(remaining):
            counts[order[i % len(order)]] += 1
    return counts


def spread_picks(regions: Sequence[str], spread: int, minimum: int) -> list[int] | str:
    """The spread rule over the ranked clusters' ``regions``: the positions of the best cluster of
    each of the ``spread`` best regions, or why there are not enough (``minimum``: the policy's
    ``spread_min_regions``)."""
    best: dict[str, int] = {}
    for k, region in enumerate(regions):
        best.setdefault(region, k)
    if len(best) < spread:
        return f"spread_min_regions={minimum} but only {len(best)} eligible region(s) have room"
    return list(best.values())[:spread]


def plan_clusters(
    *,
    resources: ResourceRequest,
    replicas: int,
    federation: FederationConfig,
    aggregates: Mapping[str, ClusterAggregate],
    clusters: Collection[str] = (),
    regions: Collection[str] = (),
    avoid_clusters: Collection[str] = (),
    avoid_regions: Collection[str] = (),
    unavailable: Collection[str] = (),
    origin_region: str | None = None,
) -> ClusterPlan:
    """Choose a cluster for each of ``replicas`` replicas (see the module docstring)."""
    policy = federation.placement
    eligible: list[str] = []
    room: dict[str, int] = {}
    for cfg in federation.clusters:
        if clusters and cfg.name not in clusters:
            continue
        if regions and cfg.region not in regions:
            continue
        if cfg.name in avoid_clusters or cfg.region in avoid_regions or cfg.name in unavailable:
            continue
        agg = aggregates.get(cfg.name)
        if agg is None or agg.ready_nodes == 0:
            continue
        room[cfg.name] = agg.room_for(resources)
        eligible.append(cfg.name)
    if not eligible:
        return ClusterPlan(reason="no eligible cluster (affinity, availability or no ready nodes)")
    fitting = [c for c in eligible if room[c] > 0] or eligible
    by_name = {c.name: c for c in federation.clusters}
    latency = {
        c: federation.latency_between(origin_region, by_name[c].region) if origin_region else 0.0
        for c in fitting
    }
    cost = {c: by_name[c].cost_per_core_hour for c in fitting}
    carbon = {c: by_name[c].carbon_g_per_kwh for c in fitting}
    nl, nc, nk = _normalised(latency), _normalised(cost), _normalised(carbon)
    scores: dict[str, dict[str, float]] = {}
    for c in fitting:
        total = policy.latency_weight * nl[c] + policy.cost_weight * nc[c] + policy.carbon_weight * nk[c]
        scores[c] = {
            "latency_ms": latency[c],
            "cost_per_core_hour": cost[c],
            "carbon_g_per_kwh": carbon[c],
            "room": float(room[c]),
            "score": total,
        }
    ranking = sorted(fitting, key=lambda c: (scores[c]["score"], -room[c], c))
    counts = {c: 0 for c in ranking}
    spread = min(policy.spread_min_regions, replicas)
    if spread > 1:
        picks = spread_picks([by_name[c].region for c in ranking], spread, policy.spread_min_regions)
        if isinstance(picks, str):
            return ClusterPlan(ranking=ranking, scores=scores, reason=picks)
        for k in picks:
            counts[ranking[k]] += 1
    rest = replicas - sum(counts.values())
    if policy.divide == "weights":
        shares = {c: by_name[c].weight for c in ranking}
    else:
        shares = {c: float(max(room[c] - counts[c], 0)) for c in ranking}
    caps = {c: max(room[c] - counts[c], 0) for c in ranking}
    for c, n in _divide(rest, shares, caps, ranking).items():
        counts[c] += n
    assignments = [c for c in ranking for _ in range(counts[c])]
    return ClusterPlan(assignments=assignments, ranking=ranking, scores=scores)
