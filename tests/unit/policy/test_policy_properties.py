"""Properties over random (node, offer, weights): masking never lets an infeasible action
through, decisions always fit, features are always finite.

The strategies draw implausible pairs too (GPU work offered to CPU nodes, requests larger than
the node), which is the point: the mask must hold for anything the hub could send.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeplane_contract.policy.actions import (
    ACCELERATORS,
    DECLINE,
    GPU_MEMORY_GB,
    MIG_PROFILE_ORDER,
    N_ACTIONS,
    N_BINS,
    action_mask,
    apply_bin,
    bin_index,
    bin_parts,
    expected_runtime,
)
from edgeplane_contract.policy.features import KINDS, N_FEATURES, NODE_TYPES, NodeView, Offer, features
from edgeplane_contract.policy.runtime import LocalPolicy

GB = 1e9

_MIG_MEMORY_GB = {"1g.5gb": 5, "2g.10gb": 10, "3g.20gb": 20, "4g.20gb": 20, "7g.40gb": 40}


@st.composite
def nodes(draw: st.DrawFn) -> NodeView:
    cap = draw(st.sampled_from([1.0, 4.0, 8.0, 64.0]) | st.floats(0.25, 128.0))
    mem = draw(st.sampled_from([4 * GB, 16 * GB, 256 * GB]) | st.floats(0.5 * GB, 1024 * GB))
    gpu_count = draw(st.integers(0, 4))
    gpus_free = draw(st.integers(0, gpu_count))
    mig = tuple(draw(st.integers(0, 7)) for _ in MIG_PROFILE_ORDER) if gpu_count else (0, 0, 0, 0, 0)
    on_battery = draw(st.booleans())
    return NodeView(
        node_type=draw(st.sampled_from(NODE_TYPES)),
        cpu_capacity=cap,
        cpu_allocated=draw(st.floats(0.0, cap)),
        memory_capacity=mem,
        memory_allocated=draw(st.floats(0.0, mem)),
        gpu_count=gpu_count,
        gpus_free=gpus_free,
        gpu_used=draw(st.floats(0.0, float(gpu_count))),
        mig_free=(mig[0], mig[1], mig[2], mig[3], mig[4]),
        replicas=draw(st.integers(0, 40)),
        sensitivity_sum=draw(st.floats(0.0, 30.0)),
        io_heavy_replicas=draw(st.integers(0, 8)),
        on_battery=on_battery,
        battery_percent=draw(st.none() | st.floats(0.0, 100.0)),
        idle_w=draw(st.floats(1.0, 400.0)),
        max_w=draw(st.floats(400.0, 1300.0)),
        cpu_dynamic_w_per_core=draw(st.none() | st.floats(0.0, 10.0)),
        gpu_dynamic_w_per_unit=draw(st.floats(0.0, 400.0)),
        power_ref_w=draw(st.sampled_from([420.0, 1250.0])),
    )


@st.composite
def offers(draw: st.DrawFn) -> Offer:
    accel = draw(st.sampled_from(["none", "gpu", "mig"]))
    return Offer(
        kind=draw(st.sampled_from(KINDS)),
        cpu=draw(st.floats(0.05, 64.0)),
        memory=draw(st.floats(0.05 * GB, 300 * GB)),
        gpu=draw(st.integers(1, 2)) if accel == "gpu" else 0,
        mig=draw(st.sampled_from(MIG_PROFILE_ORDER)) if accel == "mig" else None,
        sla_s=draw(st.none() | st.floats(0.5, 20000.0)),
        runtime_s=draw(st.none() | st.floats(0.1, 10000.0)),
        priority=draw(st.integers(0, 100)),
        transfer_s=draw(st.floats(0.0, 200.0)),
    )


weights = st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 5.0), st.floats(0.0, 20.0), st.floats(0.0, 10.0))


def fits(node: NodeView, offer: Offer, cpu: float, memory: float, accelerator: str) -> bool:
    """Whether a chosen configuration fits the node's free room and the offer's GPU need."""
    if cpu > node.cpu_capacity - node.cpu_allocated + 1e-9:
        return False
    if memory > node.memory_capacity - node.memory_allocated + 1e-6:
        return False
    need_gb = offer.gpu * GPU_MEMORY_GB + (_MIG_MEMORY_GB[offer.mig] if offer.mig else 0)
    if accelerator == "none":
        return need_gb == 0
    kind, _, value = accelerator.partition(":")
    if kind == "gpu":
        return int(value) <= node.gpus_free and int(value) * GPU_MEMORY_GB >= need_gb
    if kind == "mig":
        return node.mig_free[MIG_PROFILE_ORDER.index(value)] >= 1 and _MIG_MEMORY_GB[value] >= need_gb
    return False


@pytest.fixture(scope="module")
def shipped() -> LocalPolicy:
    policy = LocalPolicy.load()
    assert policy.source == "onnx-int8", policy.fallback_reason
    return policy


def test_there_are_64_bins_plus_decline_and_indices_round_trip() -> None:
    assert N_BINS == 64 and N_ACTIONS == 65 and DECLINE == 64
    assert sorted(bin_index(*bin_parts(b)) for b in range(N_BINS)) == list(range(N_BINS))
    with pytest.raises(ValueError):
        bin_parts(DECLINE)


@settings(max_examples=300, deadline=None)
@given(node=nodes(), offer=offers())
def test_every_allowed_bin_fits_the_node_and_decline_is_always_allowed(node: NodeView, offer: Offer) -> None:
    mask = action_mask(node, offer)
    assert mask.shape == (N_ACTIONS,) and mask.dtype == np.bool_
    assert mask[DECLINE]
    for b in np.flatnonzero(mask[:N_BINS]):
        cpu, memory, _, accelerator = apply_bin(offer, int(b))
        assert fits(node, offer, cpu, memory, accelerator), (int(b), cpu, memory, accelerator)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=nodes(), offer=offers(), w=weights)
def test_the_shipped_model_never_decides_an_infeasible_action(
    shipped: LocalPolicy, node: NodeView, offer: Offer, w: tuple[float, float, float, float]
) -> None:
    decision = shipped.decide(node, offer, w)
    assert decision.source == "onnx-int8"
    assert 0 <= decision.action <= DECLINE
    assert decision.masked == N_BINS - int(action_mask(node, offer)[:N_BINS].sum())
    if decision.decline:
        assert decision.action == DECLINE and decision.cpu == 0.0 and decision.accelerator == "none"
    else:
        assert (decision.cpu, decision.memory, decision.gpu_units, decision.accelerator) == apply_bin(
            offer, decision.action
        )
        assert fits(node, offer, decision.cpu, decision.memory, decision.accelerator)


@settings(max_examples=25, deadline=None)
@given(node=nodes(), offer=offers(), w=weights)
def test_the_heuristic_never_decides_an_infeasible_action(
    node: NodeView, offer: Offer, w: tuple[float, float, float, float]
) -> None:
    decision = LocalPolicy.heuristic().decide(node, offer, w)
    assert decision.source == "heuristic"
    if not decision.decline:
        assert fits(node, offer, decision.cpu, decision.memory, decision.accelerator)


@settings(max_examples=200, deadline=None)
@given(node=nodes(), offer=offers(), w=weights)
def test_features_are_a_finite_float32_vector_of_the_schema_length(
    node: NodeView, offer: Offer, w: tuple[float, float, float, float]
) -> None:
    x = features(node, offer, w)
    assert x.shape == (N_FEATURES,) and x.dtype == np.float32
    assert np.isfinite(x).all()
    # Bounded: the int8 model quantises the whole vector with one scale.
    assert x.min() >= 0.0 and x.max() <= 5.0


def _node(**kw: object) -> NodeView:
    base: dict[str, object] = {
        "node_type": "gpu",
        "cpu_capacity": 64.0,
        "cpu_allocated": 0.0,
        "memory_capacity": 512 * GB,
        "memory_allocated": 0.0,
        "gpu_count": 2,
    }
    base.update(kw)
    return NodeView(**base)  # type: ignore[arg-type]


def _allowed_accelerators(node: NodeView, offer: Offer) -> set[str]:
    mask = action_mask(node, offer)
    return {apply_bin(offer, int(b))[3] for b in np.flatnonzero(mask[:N_BINS])}


def test_cpu_only_work_gets_no_accelerator_and_gpu_work_never_runs_without_one() -> None:
    node = _node(gpus_free=2, mig_free=(7, 3, 2, 1, 1))
    assert _allowed_accelerators(node, Offer(cpu=2, memory=4 * GB)) == {"none"}
    assert _allowed_accelerators(node, Offer(cpu=2, memory=4 * GB, gpu=1)) == {"gpu:1", "mig:7g.40gb"}
    assert _allowed_accelerators(node, Offer(cpu=2, memory=4 * GB, gpu=2)) == {"gpu:2"}
    assert _allowed_accelerators(node, Offer(cpu=2, memory=4 * GB, mig="4g.20gb")) == {
        "mig:4g.20gb",
        "mig:3g.20gb",
        "gpu:1",
    }


def test_accelerator_options_follow_the_free_gpus_and_mig_room() -> None:
    offer = Offer(cpu=2, memory=4 * GB, mig="4g.20gb")
    only_3g = _node(gpus_free=0, mig_free=(4, 2, 1, 0, 0))
    assert _allowed_accelerators(only_3g, offer) == {"mig:3g.20gb"}
    nothing = _node(gpus_free=0, mig_free=(3, 1, 0, 0, 0))
    mask = action_mask(nothing, offer)
    assert not mask[:N_BINS].any() and mask[DECLINE]


def test_quotas_above_the_free_room_are_masked() -> None:
    node = _node(
        node_type="edge",
        cpu_capacity=8.0,
        cpu_allocated=6.0,
        memory_capacity=16 * GB,
        memory_allocated=12 * GB,
        gpu_count=0,
    )
    mask = action_mask(node, Offer(cpu=2.0, memory=3 * GB))
    allowed = {bin_parts(int(b))[:2] for b in np.flatnonzero(mask[:N_BINS])}
    # CPU x1.5 = 3 cores > 2 free; memory x1.5 = 4.5 GB > 4 GB free.
    assert allowed == {(c, m) for c in range(3) for m in range(3)}
    assert ACCELERATORS[0] == "none"


def test_smaller_quotas_run_longer() -> None:
    offer = Offer(kind="batch", cpu=8, memory=16 * GB, runtime_s=100.0)
    cpu_steps = [expected_runtime(offer, bin_index(c, 1, 0)) for c in range(4)]
    mem_steps = [expected_runtime(offer, bin_index(2, m, 0)) for m in range(4)]
    assert cpu_steps == sorted(cpu_steps, reverse=True) and cpu_steps[0] > 1.5 * cpu_steps[2]
    assert mem_steps == sorted(mem_steps, reverse=True) and mem_steps[0] > 1.2 * mem_steps[3]
    with pytest.raises(ValueError):
        apply_bin(offer, bin_index(2, 1, 3))  # whole GPU for CPU-only work
