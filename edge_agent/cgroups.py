"""CPU quotas for placement processes through Linux cgroups, where the node lets the agent.

A placement asks for ``cpu`` cores; the limiter gives its process a cgroup whose CFS quota is
``cpu`` x the period (100 ms), so the process and its children get at most that much CPU time,
however many threads they run. The child joins its cgroup between fork and exec (it writes ``0``
to the cgroup's ``cgroup.procs``), so no instruction runs unlimited.

* cgroup v1 (``/sys/fs/cgroup/cpu`` mounted and writable): ``edgeplane/<node>/<placement>``
  under it, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``.
* cgroup v2: only under a directory delegated to the agent (``cgroup_root`` in the agent config,
  e.g. a systemd unit with ``Delegate=yes``), whose ``cgroup.controllers`` lists ``cpu``;
  ``<root>/<placement>`` with ``cpu.max``. The agent does not move itself: the delegated
  directory must not hold processes (v2's no-internal-processes rule), so run the agent in a
  sibling cgroup.
* Otherwise none: quotas are recorded in the placement but not enforced, and the agent says so
  once at start.

Every unit (a placement, a function instance) also gets groups of its own for finding and killing
all its processes and bounding their number: :mod:`edge_agent.unit_groups` (its names are
importable from here too).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
from pathlib import Path
from typing import Protocol

from edge_agent.unit_groups import Hierarchy, UnitGroups, detect_unit_groups, v1_mount, v2_own_dir

__all__ = [
    "CgroupV1Cpu",
    "CgroupV2Cpu",
    "CpuLimiter",
    "Hierarchy",
    "NoCpuLimit",
    "UnitGroups",
    "detect_cpu_limiter",
    "detect_unit_groups",
    "quota_us",
    "v1_mount",
    "v2_own_dir",
]

log = logging.getLogger("edgeplane.agent.cgroups")

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel's floor for cfs_quota_us


def quota_us(cpu: float) -> int:
    """CFS quota for ``cpu`` cores per 100 ms period (at least the kernel's 1 ms)."""
    return max(MIN_QUOTA_US, round(cpu * PERIOD_US))


class CpuLimiter(Protocol):
    """Gives a placement's process a CPU quota. ``prepare`` returns the ``cgroup.procs`` file the
    child writes itself into (None: no limit); ``release`` removes what ``prepare`` made."""

    name: str

    def prepare(self, placement_id: str, cpu: float) -> Path | None: ...

    def release(self, placement_id: str) -> None: ...

    def close(self) -> None: ...


class NoCpuLimit:
    """No cgroup available: quotas are not enforced."""

    name = "none"

    def prepare(self, placement_id: str, cpu: float) -> Path | None:
        return None

    def release(self, placement_id: str) -> None:
        return None

    def close(self) -> None:
        return None


class _CgroupCpu(abc.ABC):
    """A directory of per-placement cgroups; subclasses write the quota in their version's files."""

    name = "cgroup"

    def __init__(self, root: Path) -> None:
        self.root = root

    @abc.abstractmethod
    def _write_quota(self, group: Path, cpu: float) -> None: ...

    def prepare(self, placement_id: str, cpu: float) -> Path | None:
        group = self.root / placement_id
        group.mkdir(parents=True, exist_ok=True)
        self._write_quota(group, cpu)
        return group / "cgroup.procs"

    def release(self, placement_id: str) -> None:
        # Fails while a process is still inside (EBUSY): then the next start reuses the group.
        with contextlib.suppress(OSError):
            (self.root / placement_id).rmdir()

    def close(self) -> None:
        """Remove the agent's own (empty) directory on shutdown."""
        with contextlib.suppress(OSError):
            self.root.rmdir()


class CgroupV1Cpu(_CgroupCpu):
    """cgroup v1 ``cpu`` controller: ``cpu.cfs_period_us`` and ``cpu.cfs_quota_us``."""

    name = "cgroup-v1"

    def _write_quota(self, group: Path, cpu: float) -> None:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us(cpu)))


class CgroupV2Cpu(_CgroupCpu):
    """cgroup v2 ``cpu`` controller in a delegated directory: ``cpu.max``."""

    name = "cgroup-v2"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        controllers = (root / "cgroup.subtree_control").read_text().split()
        if "cpu" not in controllers:
            # Let the children use the cpu controller (needs it in cgroup.controllers).
            (root / "cgroup.subtree_control").write_text("+cpu")

    def _write_quota(self, group: Path, cpu: float) -> None:
        (group / "cpu.max").write_text(f"{quota_us(cpu)} {PERIOD_US}")


def detect_cpu_limiter(
    node: str, *, cgroup_root: str = "", v1_mount: Path = Path("/sys/fs/cgroup/cpu")
) -> CpuLimiter:
    """The best limiter this machine allows (see the module docstring); never raises."""
    try:
        if cgroup_root:
            root = Path(cgroup_root)
            if "cpu" not in (root / "cgroup.controllers").read_text().split():
                raise OSError(f"{root}/cgroup.controllers does not list cpu")
            return CgroupV2Cpu(root)
        if (v1_mount / "cpu.cfs_quota_us").exists() and os.access(v1_mount, os.W_OK):
            root = v1_mount / "edgeplane" / node
            root.mkdir(parents=True, exist_ok=True)
            # Groups a killed agent of this name left behind are empty now (its processes died
            # with it): remove them; a group still in use refuses (EBUSY) and stays.
            for stale in root.iterdir():
                if stale.is_dir():
                    with contextlib.suppress(OSError):
                        stale.rmdir()
            probe = CgroupV1Cpu(root)
            probe.prepare(f"probe-{os.getpid()}", 1.0)
            probe.release(f"probe-{os.getpid()}")
            return probe
    except OSError as exc:
        log.warning("CPU quotas not enforced: %s", exc)
        return NoCpuLimit()
    log.info("CPU quotas not enforced: no writable cgroup v1 cpu controller and no cgroup_root (v2)")
    return NoCpuLimit()
