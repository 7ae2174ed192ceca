"""CPU quotas through cgroups: enforced for real where this machine has a writable cgroup v1 cpu
controller (skipped elsewhere); the v2 file protocol against a directory laid out like one."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.cgroups import CgroupV1Cpu, CgroupV2Cpu, NoCpuLimit, detect_cpu_limiter, quota_us
from edge_agent.executor import ProcessRunner

V1 = Path("/sys/fs/cgroup/cpu")
HAS_V1 = (V1 / "cpu.cfs_quota_us").exists() and os.access(V1, os.W_OK)
BURN = ["sh", "-c", "while :; do :; done"]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_quota_is_cores_times_the_period_with_the_kernels_floor():
    assert quota_us(0.5) == 50_000 and quota_us(2) == 200_000 and quota_us(0.001) == 1_000


@pytest.mark.skipif(not HAS_V1, reason="no writable cgroup v1 cpu controller here")
async def test_a_placement_gets_its_cpu_quota_and_the_group_goes_with_it(tmp_path):
    node = f"test-{os.getpid()}"
    limiter = detect_cpu_limiter(node)
    assert isinstance(limiter, CgroupV1Cpu)
    runner = ProcessRunner(work_dir=tmp_path, on_change=lambda s: None, stop_grace_s=1, cpu_limiter=limiter)
    try:
        await runner.start("burn", "w", RunSpec(command=BURN, cpu=0.2))
        entry = runner.placements["burn"]
        assert entry.process is not None and "cpu:cgroup-v1" in entry.limits
        group = V1 / "edgeplane" / node / "burn"
        assert (group / "cpu.cfs_quota_us").read_text().strip() == "20000"
        assert str(entry.process.pid) in (group / "cgroup.procs").read_text().split()
        await asyncio.sleep(0.3)
        before, began = _cpu_seconds(entry.process.pid), time.monotonic()
        await asyncio.sleep(1.5)
        used = (_cpu_seconds(entry.process.pid) - before) / (time.monotonic() - began)
        assert used < 0.35, f"a 0.2-core quota used {used:.2f} cores"  # unlimited: ~1.0
    finally:
        await runner.stop_all()
        limiter.close()
    assert not (V1 / "edgeplane" / node).exists()


@pytest.mark.skipif(not HAS_V1, reason="no writable cgroup v1 cpu controller here")
def test_groups_a_killed_agent_left_behind_are_removed_at_the_next_start():
    node = f"test-stale-{os.getpid()}"
    stale = V1 / "edgeplane" / node / "left-behind"
    stale.mkdir(parents=True)
    limiter = detect_cpu_limiter(node)
    assert isinstance(limiter, CgroupV1Cpu) and not stale.exists()
    limiter.close()


@pytest.mark.skipif(not HAS_V1, reason="no writable cgroup v1 cpu controller here")
async def test_without_a_limiter_the_same_process_is_not_throttled(tmp_path):
    runner = ProcessRunner(work_dir=tmp_path, on_change=lambda s: None, stop_grace_s=1)
    try:
        await runner.start("free", "w", RunSpec(command=BURN, cpu=0.2))
        entry = runner.placements["free"]
        assert entry.process is not None and entry.limits == ["memory:rlimit_as"]
        await asyncio.sleep(0.3)
        before, began = _cpu_seconds(entry.process.pid), time.monotonic()
        await asyncio.sleep(1.0)
        assert (_cpu_seconds(entry.process.pid) - before) / (time.monotonic() - began) > 0.35
    finally:
        await runner.stop_all()


def test_v2_writes_cpu_max_in_a_delegated_directory(tmp_path):
    root = tmp_path / "delegated"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("\n")
    limiter = detect_cpu_limiter("n1", cgroup_root=str(root))
    assert isinstance(limiter, CgroupV2Cpu)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"
    procs = limiter.prepare("p1", 1.5)
    assert procs == root / "p1" / "cgroup.procs"
    assert (root / "p1" / "cpu.max").read_text() == "150000 100000"
    (root / "p1" / "cpu.max").unlink()  # a real cgroup's files vanish with it
    limiter.release("p1")
    assert not (root / "p1").exists()


def test_a_cgroup_root_without_the_cpu_controller_means_no_limits(tmp_path, caplog):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    limiter = detect_cpu_limiter("n1", cgroup_root=str(tmp_path))
    assert isinstance(limiter, NoCpuLimit)
    assert "does not list cpu" in caplog.text
    assert isinstance(detect_cpu_limiter("n1", v1_mount=tmp_path / "missing"), NoCpuLimit)


async def test_a_limiter_that_fails_leaves_the_process_running_unlimited(tmp_path):
    class Broken:
        name = "broken"

        def prepare(self, placement_id: str, cpu: float) -> Path | None:
            raise PermissionError("read-only cgroupfs")

        def release(self, placement_id: str) -> None:
            return None

    states: list[PlacementState] = []
    runner = ProcessRunner(work_dir=tmp_path, on_change=states.append, cpu_limiter=Broken())
    await runner.start("p", "w", RunSpec(command=["true"]))
    entry = runner.placements["p"]
    assert entry.task is not None
    await asyncio.wait_for(entry.task, 5)
    assert entry.state.state == "Succeeded" and entry.limits == ["memory:rlimit_as"]
