"""The mig-fragmentation preset (issue 13): it runs, and large MIG arrivals are classed right."""

from __future__ import annotations

from dataclasses import replace

import pytest

from edgeplane_contract.power import DEFAULT_POWER_SPECS

from controlplane.scheduling.model import Assignment, GpuDevice, MigSlice, NodeState
from controlplane.sim.metrics import _large_mig
from controlplane.sim.migfit import FITS, FRAGMENTED, NO_ROOM, arrival_fit
from controlplane.sim.physics import SimNode
from controlplane.sim.presets import PRESETS, get_preset, scale_preset
from controlplane.sim.runner import run_comparison


class _Rep:
    """The one field arrival_fit reads of a running replica."""

    def __init__(self, *slices: tuple[int, str, int]) -> None:
        self.assignment = Assignment(cpu=1, memory=2**30, mig=tuple(MigSlice(g, p, s) for g, p, s in slices))


def node(name: str, *slices: tuple[int, str, int], state: str = "on") -> SimNode:
    template = NodeState(
        name=name,
        cpu=64,
        memory=512 * 2**30,
        node_type="gpu",
        gpus=[GpuDevice(0, mig_enabled=True), GpuDevice(1, mig_enabled=True)],
    )
    n = SimNode(0, template, DEFAULT_POWER_SPECS["gpu"], "gpu-mig")
    n.state = state
    for k, s in enumerate(slices):
        n.replicas[(f"w{k}", 0)] = _Rep(s)  # type: ignore[assignment]
    return n


# Each GPU: 1g at slice 0 (blocks 4g.20gb's only start and 7g.40gb) -> 12 compute slices free.
BLOCKED = ((0, "1g.5gb", 0), (1, "1g.5gb", 0))
FULL = ((0, "7g.40gb", 0), (1, "7g.40gb", 0))


@pytest.mark.parametrize(
    ("nodes", "profile", "expected"),
    [
        ([node("a")], "7g.40gb", FITS),
        ([node("a", *BLOCKED)], "4g.20gb", FRAGMENTED),
        ([node("a", *BLOCKED)], "7g.40gb", FRAGMENTED),
        ([node("a", *BLOCKED)], "3g.20gb", FITS),  # 3g.20gb may also start at slice 4
        ([node("a", *FULL)], "1g.5gb", NO_ROOM),
        ([node("a", *FULL), node("b", *BLOCKED)], "7g.40gb", FRAGMENTED),
        # Slices spread thin over two nodes: 6 free on each of 4 GPUs, no whole GPU anywhere.
        ([node("a", *BLOCKED), node("b", *BLOCKED), node("c", *FULL)], "7g.40gb", FRAGMENTED),
        ([node("a", *FULL), node("b", (0, "7g.40gb", 0))], "7g.40gb", FITS),
        # A dead node's GPUs are no room at all; a suspended one counts as empty (after a wake).
        ([node("a", *FULL), node("b", state="dead")], "1g.5gb", NO_ROOM),
        ([node("a", *FULL), node("b", state="off")], "7g.40gb", FITS),
    ],
)
def test_a_large_arrival_is_classed_by_where_the_free_slices_sit(nodes, profile, expected):
    assert arrival_fit(nodes, profile) == expected


def test_fewer_free_compute_slices_in_total_than_needed_is_no_room():
    # Four 1g.5gb at slices 0-3 on one GPU and a 4g.20gb on the other: 3 + 3 compute slices free
    # (and 4 + 4 memory slices); a 7g.40gb needs 7 compute slices: no room in the fleet.
    gpu0 = [(0, "1g.5gb", k) for k in range(4)]
    assert arrival_fit([node("a", *gpu0, (1, "4g.20gb", 0))], "7g.40gb") == NO_ROOM


def test_the_preset_is_listed_and_offers_large_mig_requests_beside_small_slices():
    preset = get_preset("mig-fragmentation")
    assert PRESETS["mig-fragmentation"] is preset
    assert all(g.mig_gpus == g.gpus > 0 for g in preset.groups)
    large = {p for c in preset.classes if c.large_gpu for p, _ in c.mig}
    small = {p for c in preset.classes if not c.large_gpu for p, _ in c.mig}
    assert large == {"7g.40gb", "4g.20gb"} and small == {"1g.5gb", "2g.10gb", "3g.20gb"}


def test_a_small_slice_of_the_preset_runs_and_reports_fragmented_arrivals():
    preset = replace(scale_preset(get_preset("mig-fragmentation"), 8), warmup_s=600.0, drain_s=1200.0)
    report = run_comparison(preset=preset, schedulers=["default", "edgeplane"], hours=0.5, seed=3)
    for run in report["runs"].values():
        assert run["large_gpu_mig_arrivals"] > 0
        assert 0 <= run["large_gpu_fragmented_arrivals"] <= run["large_gpu_mig_arrivals"]
        assert 0.0 <= run["large_gpu_schedulability"] <= 1.0
    # The arrivals are shared, so the number classed is too; where slices sit is not.
    assert len({r["large_gpu_mig_arrivals"] for r in report["runs"].values()}) == 1
    # Fragmented arrivals exist in this small, busy fleet (else the scenario tests nothing).
    assert any(r["large_gpu_fragmented_arrivals"] for r in report["runs"].values())


def test_schedulability_of_fragmented_arrivals_counts_only_those():
    rec_tasks = [
        {"arrival_fit": FRAGMENTED, "started_in_time": True, "queue_s": 30.0},
        {"arrival_fit": FRAGMENTED, "started_in_time": False, "queue_s": None},
        {"arrival_fit": FITS, "started_in_time": True, "queue_s": 0.0},
        {"arrival_fit": None, "started_in_time": False, "queue_s": None},
    ]
    out = _large_mig(rec_tasks)
    assert out["large_gpu_mig_arrivals"] == 3
    assert out["large_gpu_fragmented_arrivals"] == 2
    assert out["large_gpu_schedulability_fragmented"] == pytest.approx(0.5)
    assert out["large_gpu_started_at_arrival"] == pytest.approx(0.25)
