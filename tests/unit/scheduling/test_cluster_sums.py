"""The cluster aggregates kept between decisions (``federation_plan._ClusterSums``): after any
sequence of placements, releases and readiness changes they equal both a fresh build and a
plain recomputation over the nodes' current state."""

from __future__ import annotations

import random

import numpy as np
import pytest

from controlplane.scheduling.federation_plan import _CACHE_KEY, _ClusterSums, cluster_aggregates
from controlplane.scheduling.model import Assignment, GpuDevice, MigSlice, NodeState
from controlplane.scheduling.nodetable import NodeTable


def _table(rng: random.Random) -> NodeTable:
    table = NodeTable()
    for i in range(60):
        gpus = [GpuDevice(index=g, mig_enabled=rng.random() < 0.4) for g in range(rng.choice((0, 0, 1, 2)))]
        table.upsert(
            NodeState(
                name=f"n{i}",
                cluster=f"c{i % 7}",
                region=f"r{i % 7 // 3}",
                cpu=rng.choice((2.0, 4.0, 8.5)),
                memory=rng.choice((4, 8, 16)) * 2**30,
                gpus=gpus,
                dpus=rng.choice((0, 0, 2)),
            )
        )
    return table


def _reference(table: NodeTable) -> dict[str, tuple[object, ...]]:
    """Each cluster's figures summed row by row from the columns, as the scheduler reads them."""
    out: dict[str, list[float]] = {}
    largest: dict[str, int] = {}
    for row, state in enumerate(table.states):
        figures = out.setdefault(state.cluster, [0, 0.0, 0.0, 0, 0, 0, 0.0])
        largest.setdefault(state.cluster, 0)
        if not table.ready[row]:
            continue
        free_slices = (7 - table.mig_comp[row]) * table.mig_gpu[row]
        figures[0] += 1
        figures[1] += table.cpu_cap[row] - table.cpu_alloc[row]
        figures[2] += table.mem_cap[row] - table.mem_alloc[row]
        figures[3] += int((table.has_gpu[row] & ~table.mig_gpu[row] & ~table.gpu_used[row]).sum())
        figures[4] += int(free_slices.sum())
        figures[5] += int(table.dpu_count[row]) - bin(int(table.dpu_used[row])).count("1")
        figures[6] += table.cpu_cap[row]
        largest[state.cluster] = max(
            largest[state.cluster], int(free_slices.max()) if free_slices.size else 0
        )
    return {c: (*(round(x, 3) for x in f), largest[c]) for c, f in out.items()}


def _seen(table: NodeTable) -> dict[str, tuple[object, ...]]:
    return {
        a.name: (
            a.ready_nodes,
            round(a.cpu_free, 3),
            a.memory_free,
            a.gpus_free,
            a.mig_compute_free,
            a.dpus_free,
            round(a.cpu_capacity, 3),
            a.mig_largest_free,
        )
        for a in cluster_aggregates(table).values()
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_sums_follow_every_change_exactly(seed: int) -> None:
    rng = random.Random(seed)
    table = _table(rng)
    held: list[tuple[int, Assignment]] = []
    assert _seen(table) == _reference(table)
    kept = table.static_cache[_CACHE_KEY]
    for step in range(400):
        action = rng.random()
        row = rng.randrange(len(table))
        if action < 0.5:
            state = table.states[row]
            gpus = tuple(
                g for g in range(len(state.gpus)) if not table.mig_gpu[row, g] and not table.gpu_used[row, g]
            )[: rng.randint(0, 1)]
            mig: tuple[MigSlice, ...] = ()
            migs = [g for g in range(len(state.gpus)) if table.mig_gpu[row, g]]
            if migs and rng.random() < 0.5 and table.mig_comp[row, migs[0]] == 0:
                mig = (MigSlice(gpu=migs[0], profile="1g.5gb", start=6),)
            dpus = (0,) if table.dpu_count[row] and not int(table.dpu_used[row]) & 1 else ()
            a = Assignment(
                cpu=rng.choice((0.1, 0.25, 1.0)),
                memory=rng.choice((1, 3)) * 2**28,
                gpus=gpus,
                mig=mig,
                dpus=dpus,
            )
            table.apply(row, a, +1)
            held.append((row, a))
        elif action < 0.85 and held:
            row, a = held.pop(rng.randrange(len(held)))
            table.apply(row, a, -1)
        else:
            table.set_ready(row, not bool(table.ready[row]))
        if step % 7 == 0 or step > 390:
            assert _seen(table) == _reference(table), step
            assert table.static_cache[_CACHE_KEY] is kept  # kept, not rebuilt
            fresh = _ClusterSums(table)
            assert np.array_equal(fresh.sums, kept.sums) and np.array_equal(fresh.largest, kept.largest)


def test_a_new_node_rebuilds_the_sums() -> None:
    table = _table(random.Random(4))
    before = cluster_aggregates(table)
    table.upsert(NodeState(name="late", cluster="c-new", region="r9", cpu=3.0, memory=2**30))
    after = cluster_aggregates(table)
    assert "c-new" not in before and after["c-new"].ready_nodes == 1 and after["c-new"].region == "r9"
    assert after["c-new"].cpu_free == 3.0
    assert _seen(table) == _reference(table)
