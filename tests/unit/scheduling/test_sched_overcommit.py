"""Property: no sequence of schedule/release ever over-commits a node."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import GpuDevice, NodeState, WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler

GiB = 2**30
MIG = list(MIG_SPECS)

requests = st.builds(
    lambda cpu, mem, kind, mig, gpu, dpu, replicas, gang, prio: (
        cpu,
        mem,
        kind,
        mig,
        gpu,
        dpu,
        replicas,
        gang,
        prio,
    ),
    st.sampled_from([0.5, 1, 2, 4, 8, 16]),
    st.sampled_from([1, 4, 16, 64]),
    st.sampled_from(["plain", "mig", "gpu", "dpu"]),
    st.lists(st.sampled_from(MIG), min_size=1, max_size=2),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 3),
)
ops = st.lists(
    st.one_of(st.tuples(st.just("schedule"), requests), st.tuples(st.just("release"), st.integers(0, 50))),
    min_size=1,
    max_size=40,
)


def fleet(profile: str) -> Scheduler:
    s = Scheduler(profile, seed=1, clock=lambda: 0.0)
    s.upsert_node(NodeState("c0", cpu=16, memory=64 * GiB))
    s.upsert_node(NodeState("c1", cpu=8, memory=32 * GiB))
    s.upsert_node(
        NodeState(
            "g0",
            cpu=16,
            memory=64 * GiB,
            node_type="gpu",
            gpus=[GpuDevice(0, mig_enabled=True), GpuDevice(1, mig_enabled=True)],
        )
    )
    s.upsert_node(
        NodeState("g1", cpu=16, memory=64 * GiB, node_type="gpu", gpus=[GpuDevice(0), GpuDevice(1)])
    )
    s.upsert_node(NodeState("d0", cpu=16, memory=64 * GiB, node_type="dpu", dpus=2))
    return s


def check(s: Scheduler) -> None:
    """Recompute every node's usage from the ledger and compare with capacity and the table."""
    for name in s.nodes.names:
        node = s.nodes.states[s.nodes.index[name]]
        allocs = s.ledger.on_node(name)
        cpu = sum(a.assignment.cpu for a in allocs)
        mem = sum(a.assignment.memory for a in allocs)
        assert cpu <= node.cpu + 1e-9 and mem <= node.memory
        gpus = [g for a in allocs for g in a.assignment.gpus]
        assert len(gpus) == len(set(gpus))
        mig_gpus = {g.index for g in node.gpus if g.mig_enabled}
        assert not set(gpus) & mig_gpus
        per_gpu: dict[int, list[tuple[str, int]]] = {}
        for a in allocs:
            for sl in a.assignment.mig:
                assert sl.gpu in mig_gpus and sl.start in MIG_SPECS[sl.profile].starts
                per_gpu.setdefault(sl.gpu, []).append((sl.profile, sl.start))
        for slices in per_gpu.values():
            occ = 0
            for profile, start in slices:
                mask = MIG_SPECS[profile].mask(start)
                assert not occ & mask, "overlapping MIG memory slices"
                occ |= mask
            assert sum(MIG_SPECS[p].compute for p, _ in slices) <= 7
        dpus = [d for a in allocs for d in a.assignment.dpus]
        assert len(dpus) == len(set(dpus)) and all(0 <= d < node.dpus for d in dpus)
        row = s.nodes.index[name]
        assert abs(s.nodes.cpu_alloc[row] - cpu) < 1e-6
        sevenths = 7 * len(gpus) + sum(MIG_SPECS[p].compute for sl in per_gpu.values() for p, _ in sl)
        assert s.nodes.gpu_sevenths[row] == sevenths


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(["default", "binpack", "edgeplane"]), steps=ops)
def test_no_sequence_of_schedule_and_release_over_commits(profile, steps):
    s = fleet(profile)
    n = 0
    for op, arg in steps:
        if op == "schedule":
            cpu, mem, kind, mig, gpu, dpu, replicas, gang, prio = arg
            res = ResourceRequest(
                cpu=cpu,
                memory=mem * GiB,
                mig=mig if kind == "mig" else [],
                gpu=gpu if kind == "gpu" else 0,
                dpu=dpu if kind == "dpu" else 0,
            )
            n += 1
            d = s.schedule(
                WorkloadRequest(f"w{n}", resources=res, replicas=replicas, gang=gang, priority=prio)
            )
            if gang:
                assert all(p.placed for p in d.placements) or not any(p.placed for p in d.placements)
        else:
            s.release(f"w{arg}")
            s.schedule_pending()
        check(s)
