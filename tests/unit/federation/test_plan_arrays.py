"""The column-wise cluster plan (controlplane/federation/plan_arrays.py) is the reference's
(``plan_clusters``): the same assignments, ranking, reason and scores on random federations."""

from __future__ import annotations

import random

import pytest

from edgeplane_contract.resources import MIG_PROFILES, ResourceRequest

from controlplane.federation.config import ClusterConfig, FederationConfig, PlacementPolicy
from controlplane.federation.placement import ClusterAggregate, plan_clusters
from controlplane.federation.plan_arrays import columns_of, plan_clusters_columns

GiB = 2**30


def _federation(rng: random.Random) -> FederationConfig:
    n = rng.randint(2, 40)
    regions = [f"r{i}" for i in range(rng.randint(1, 6))]
    clusters = [
        ClusterConfig(
            name=f"c{rng.randint(0, 999):03d}-{i}",  # names not in index order: the tie-break by name
            region=rng.choice(regions),
            cost_per_core_hour=rng.choice([0.03, 0.04, rng.uniform(0.01, 0.09)]),
            carbon_g_per_kwh=rng.choice([100.0, 300.0, rng.uniform(50, 500)]),
            weight=rng.choice([1.0, 2.0, rng.uniform(0.1, 5.0), 0.0]),
        )
        for i in range(n)
    ]
    latency = {(a, b): rng.uniform(5, 150) for a in regions for b in regions if a < b and rng.random() < 0.7}
    policy = PlacementPolicy(
        divide=rng.choice(["capacity", "weights"]),
        spread_min_regions=rng.choice([1, 1, 2, 3]),
        latency_weight=rng.choice([1.0, 0.0, rng.uniform(0, 2)]),
        cost_weight=rng.choice([0.5, 0.0, rng.uniform(0, 2)]),
        carbon_weight=rng.choice([0.5, rng.uniform(0, 2)]),
    )
    return FederationConfig(
        clusters=clusters, default_cluster=clusters[0].name, latency_ms=latency, placement=policy
    )


def _aggregates(rng: random.Random, federation: FederationConfig) -> dict[str, ClusterAggregate]:
    out = {}
    for c in federation.clusters:
        if rng.random() < 0.1:
            continue  # a cluster no node has joined
        out[c.name] = ClusterAggregate(
            name=c.name,
            region=c.region,
            ready_nodes=rng.choice([0, 1, 5, 100]),
            cpu_free=rng.choice([0.0, -0.5, rng.uniform(0, 64), 8.0]),
            memory_free=float(rng.choice([0, rng.randint(0, 256) * GiB])),
            gpus_free=rng.randint(0, 4),
            mig_compute_free=rng.randint(0, 14),
            dpus_free=rng.randint(0, 2),
            mig_largest_free=rng.choice([None, 0, 3, 7]),
            mig_hosts=rng.choice([None, 0, 1, 2]),
            replica_slots=rng.choice([None, 0, 1, 3, 40]),
        )
    return out


def _request(rng: random.Random) -> ResourceRequest:
    return ResourceRequest(
        cpu=rng.choice([0.0, 0.25, 1.0, 3.0]),
        memory=rng.choice([0, GiB // 2, 4 * GiB]),
        gpu=rng.choice([0, 0, 1]),
        mig=rng.choice([[], [], [rng.choice(list(MIG_PROFILES))]]),
        dpu=rng.choice([0, 0, 1]),
    )


def _names(rng: random.Random, pool: list[str], p: float) -> list[str]:
    return [n for n in pool if rng.random() < p] if rng.random() < 0.3 else []


@pytest.mark.parametrize("seed", range(6))
def test_the_column_plan_is_the_reference_plan(seed: int) -> None:
    rng = random.Random(seed)
    compared = planned = 0
    for _ in range(150):
        federation = _federation(rng)
        aggregates = _aggregates(rng, federation)
        names = [c.name for c in federation.clusters]
        regions = sorted({c.region for c in federation.clusters})
        kwargs = {
            "resources": _request(rng),
            "replicas": rng.choice([1, 1, 2, 3, 7, 40]),
            "federation": federation,
            "clusters": _names(rng, names, 0.5),
            "regions": _names(rng, regions, 0.6),
            "avoid_clusters": _names(rng, names, 0.2),
            "avoid_regions": _names(rng, regions, 0.2),
            "unavailable": _names(rng, names, 0.2),
            "origin_region": rng.choice([None, "", *regions, "elsewhere"]),
        }
        want = plan_clusters(aggregates=aggregates, **kwargs)
        got = plan_clusters_columns(columns=columns_of(federation, aggregates), **kwargs)
        assert (got.assignments, got.ranking, got.reason) == (want.assignments, want.ranking, want.reason)
        assert got.scores.keys() == want.scores.keys()
        for name, score in want.scores.items():
            assert got.scores[name] == pytest.approx(score, rel=1e-12, abs=1e-12)
        compared += 1
        planned += want.ok
    assert planned > 50  # most draws plan something: the comparison is not of refusals only


def test_without_scores_the_plan_is_the_same_and_the_table_empty() -> None:
    rng = random.Random(7)
    federation = _federation(rng)
    aggregates = _aggregates(rng, federation)
    kwargs = {"resources": ResourceRequest(cpu=1.0, memory=GiB), "replicas": 3, "federation": federation}
    full = plan_clusters_columns(columns=columns_of(federation, aggregates), **kwargs)
    bare = plan_clusters_columns(columns=columns_of(federation, aggregates), scores=False, **kwargs)
    assert (bare.assignments, bare.ranking, bare.reason) == (full.assignments, full.ranking, full.reason)
    assert bare.scores == {} and (full.scores or not full.ranking)
