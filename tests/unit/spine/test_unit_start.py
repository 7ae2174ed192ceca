"""A unit's process is confined from its first instruction: the program the agent execs already
sits in the unit's cgroups (every hierarchy, the CPU quota's too), runs as the run user, with no
new privileges and the seccomp filter. A guard for any faster start path (a process prepared
ahead, a move done by the agent): whatever runs the unit's code must have joined first.

Real confinement, as a root agent applies it; skipped where this machine gives none."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.cgroups import NoCpuLimit, detect_cpu_limiter
from edge_agent.confinement import Confinement
from edge_agent.executor import ProcessRunner
from edge_agent.unit_groups import favors_dynamic_moves

# Read by the shell itself (builtins only): /proc/self is the exec'd process, not a child of it.
PROBE = (
    'while read line; do echo "cgroup $line"; done < /proc/self/cgroup; '
    'while read key value rest; do case $key in Uid:|NoNewPrivs:|Seccomp:) echo "$key $value";; esac; '
    "done < /proc/self/status"
)


async def _finished(runner: ProcessRunner, placement_id: str, timeout_s: float = 10.0) -> PlacementState:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = runner.placements[placement_id].state
        if state.state != "Running":
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"placement {placement_id} still Running after {timeout_s} s")


@pytest.mark.parametrize("forker", ["agent", "spawner"])
async def test_the_units_first_instruction_already_runs_in_its_groups_as_the_run_user(tmp_path, forker):
    if os.geteuid() != 0:
        pytest.skip("the agent is not root here: no run user, no cgroups to join")
    node = f"test-start-{os.getpid()}"
    confinement = Confinement.detect(node=node, work_dir=tmp_path / "agent", pids_max=512)
    if not confinement.groups.hierarchies:
        pytest.skip("no cgroup hierarchy the agent can use here")
    limiter = detect_cpu_limiter(node)
    runner = ProcessRunner(
        work_dir=tmp_path / "agent", on_change=lambda s: None, cpu_limiter=limiter, confinement=confinement
    )
    if forker == "spawner":  # the unit spawner forks it (edge_agent/spawner.py), as agents do by default
        await confinement.start_spawner()
        assert confinement.spawner is not None and confinement.report["spawner"] == "fork-server"
    try:
        await runner.start("first-p", "first-w", RunSpec(command=["sh", "-c", PROBE], cpu=0.5))
        entry = runner.placements["first-p"]
        assert entry.sandbox is not None
        unit = entry.sandbox.unit
        state = await _finished(runner, "first-p")
        assert state.state == "Succeeded", state.message
        lines = (tmp_path / "agent" / "logs" / "first-p.log").read_text().splitlines()
    finally:
        await runner.stop_all()
        await confinement.stop_spawner()
        confinement.shutdown()
        limiter.close()
    groups = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in lines if line.startswith("cgroup ")}
    for hierarchy in confinement.groups.hierarchies:
        # The unit's group as the process sees it: the path below the mount, ending in the unit.
        controller = "" if hierarchy.version == 2 else "pids"
        assert groups[controller].endswith(f"/{unit}"), (hierarchy, groups)
    if not isinstance(limiter, NoCpuLimit):
        assert groups["cpu"].endswith(f"/{node}/first-p"), groups
    status = dict(line.split(" ", 1) for line in lines if not line.startswith("cgroup "))
    run_user = confinement.run_user
    assert run_user.drops and run_user.uid is not None
    assert status["Uid:"] == str(run_user.uid) != "0"
    assert status["NoNewPrivs:"] == "1"
    if confinement.seccomp is not None:
        assert status["Seccomp:"] == "2"  # a filter is loaded
    assert not Path(f"/sys/fs/cgroup/cpu/edgeplane/{node}/first-p").exists(), "the groups go with it"


V2 = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw{}"
V1 = "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids{}"


@pytest.mark.parametrize(
    ("mountinfo", "favored"),
    [
        (V2.format("") + "\n" + V1.format(""), False),
        (V2.format(",nsdelegate,favordynmods") + "\n" + V1.format(""), True),
        (V1.format(",favordynmods"), True),
        # Only a cgroup mount's own options count, not a path or another file system's.
        ("50 1 0:40 / /favordynmods rw - tmpfs tmpfs rw,favordynmods", False),
        ("", False),
    ],
)
def test_a_cgroup_mount_with_favordynmods_means_moves_do_not_wait_a_grace_period(mountinfo, favored):
    assert favors_dynamic_moves(mountinfo) is favored
