"""The agent's cgroup primer (edge_agent/cgroup_primer.py): which file it writes, that writing it
leaves the agent where it was, and that a primer that cannot write turns itself off."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from edge_agent import cgroup_primer
from edge_agent.cgroup_primer import CgroupPrimer, own_group_procs
from edge_agent.unit_groups import Hierarchy, UnitGroups

V1_ONLY = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
"""
HYBRID = V1_ONLY + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"


def test_the_primer_writes_its_own_group_v2_first_then_v1_pids():
    assert own_group_procs(HYBRID, "8:pids:/a\n0::/b\n") == Path("/sys/fs/cgroup/unified/b/cgroup.procs")
    v1 = own_group_procs(V1_ONLY, "8:pids:/edge/agent\n")
    assert v1 == Path("/sys/fs/cgroup/pids/edge/agent/cgroup.procs")
    assert own_group_procs(V1_ONLY, "8:cpu,cpuacct:/x\n") is None  # no pids line
    assert own_group_procs("", "0::/\n") is None


def test_a_primer_that_cannot_write_turns_itself_off(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroup_primer, "HOLD_S", 0.05)
    primer = CgroupPrimer(tmp_path / "missing" / "cgroup.procs")
    assert primer.enabled
    primer.expect_start()
    deadline = time.monotonic() + 5
    while primer.enabled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not primer.enabled
    primer.expect_start()  # a no-op now


def _own_groups() -> str:
    return Path("/proc/self/cgroup").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="moving a process between cgroups needs root")
def test_priming_leaves_the_agent_in_its_own_groups_and_stops_after_the_hold(monkeypatch):
    # Units with groups (where they are made does not matter to the primer: it writes its own).
    groups = UnitGroups([Hierarchy(root=Path("/unused"), version=1, pids=True, kill=False)], pids_max=None)
    if own_group_procs(Path("/proc/self/mountinfo").read_text(), _own_groups()) is None:
        pytest.skip("no cgroup hierarchy here")
    monkeypatch.setattr(cgroup_primer, "HOLD_S", 0.1)
    before = _own_groups()
    primer = CgroupPrimer.detect(groups)
    assert primer.enabled
    primer.expect_start()
    thread = primer._thread
    time.sleep(0.05)
    primer.expect_start()  # extends the window, no second thread
    assert primer._thread is thread
    deadline = time.monotonic() + 5
    while primer.holding and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not primer.holding  # the window closed by itself
    assert primer.enabled  # its writes succeeded
    assert _own_groups() == before
