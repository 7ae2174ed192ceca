"""Action space and masking: counts of total/remaining actions and the accelerator choice."""

from __future__ import annotations

import numpy as np

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.actions import ActionSpace, ActionSpaceConfig
from controlplane.scheduling.model import Assignment, MigSlice
from controlplane.scheduling.nodetable import NodeTable


def table(*nodes):
    t = NodeTable()
    for n in nodes:
        t.upsert(n)
    return t


def test_cpu_only_request_has_one_action_per_node_per_bin_pair(mk):
    t = table(mk.cpu_node("a", cpu=8), mk.cpu_node("b", cpu=2))
    space = ActionSpace(ActionSpaceConfig(cpu_bins=(1.0, 2.0), memory_bins=(1.0,)))
    na = space.analyse(t, ResourceRequest(cpu=2, memory=mk.GiB))
    assert na.total.tolist() == [2, 2]
    # b fits the 1x bin (2 cores) but not the 2x bin (4 cores).
    assert na.feasible.tolist() == [2, 1]


def test_mig_actions_count_gpus_times_legal_starts_and_mask_taken_slices(mk):
    t = table(mk.gpu_node("g", mig=2), mk.cpu_node("c"))
    t.apply(0, Assignment(cpu=1, memory=mk.GiB, mig=(MigSlice(0, "3g.20gb", 4),)), +1)
    na = ActionSpace().analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, mig=["2g.10gb"]))
    assert na.total.tolist() == [6, 1]  # 2 GPUs x 3 starts; the CPU node counts one masked action
    assert na.feasible.tolist() == [5, 0]  # start 4 on GPU 0 is taken
    reasons = {r.reason: r.mask.tolist() for r in na.rejections if r.mask.any()}
    assert reasons["node has no MIG-enabled GPU"] == [False, True]


def test_whole_gpu_requests_count_combinations(mk):
    t = table(mk.gpu_node("g", gpus=4))
    t.apply(0, Assignment(cpu=1, memory=mk.GiB, gpus=(0,)), +1)
    na = ActionSpace().analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, gpu=2))
    assert na.total.tolist() == [6]  # C(4, 2)
    assert na.feasible.tolist() == [3]  # C(3, 2)


def test_best_fit_puts_a_small_slice_where_it_costs_least(mk):
    t = table(mk.gpu_node("g", mig=2))
    t.apply(0, Assignment(cpu=1, memory=mk.GiB, mig=(MigSlice(1, "1g.5gb", 6),)), +1)
    res = ResourceRequest(cpu=1, memory=mk.GiB, mig=["1g.5gb"])
    chosen = {}
    for policy in ("first_fit", "best_fit"):
        space = ActionSpace(ActionSpaceConfig(accelerator_policy=policy))
        cand = space.candidates(t, res, space.analyse(t, res), np.array([0]))
        ((col, _, start),) = cand.mig[0]
        chosen[policy] = (col, start)
    assert chosen["first_fit"] == (0, 0)  # device-plugin order: breaks the empty GPU
    # best fit keeps GPU 0 whole (room for a 7g.40gb) and packs next to the existing slice
    assert chosen["best_fit"][0] == 1
    assert chosen["best_fit"][1] in (4, 5)


def test_several_mig_instances_are_laid_out_together_or_not_at_all(mk):
    t = table(mk.gpu_node("g", mig=1, gpus=1))
    space = ActionSpace(ActionSpaceConfig(accelerator_policy="best_fit"))
    ok = space.analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, mig=["4g.20gb", "3g.20gb"]))
    assert ok.feasible.tolist() == [1]
    too_much = space.analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, mig=["4g.20gb", "4g.20gb"]))
    assert too_much.feasible.tolist() == [0]


def test_dpu_requests_are_masked_by_free_dpus(mk):
    t = table(mk.cpu_node("d", dpus=2, node_type="dpu"), mk.cpu_node("c"))
    t.apply(0, Assignment(cpu=1, memory=mk.GiB, dpus=(0,)), +1)
    na = ActionSpace().analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, dpu=2))
    assert na.feasible.tolist() == [0, 0]
    na = ActionSpace().analyse(t, ResourceRequest(cpu=1, memory=mk.GiB, dpu=1))
    assert na.feasible.tolist() == [1, 0]
