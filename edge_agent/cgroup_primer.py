"""Open the kernel's cgroup-move fast path just before a unit is likely to start.

A unit's child joins its cgroups before exec. Every move of a process between cgroups takes a
machine-wide lock (``cgroup_threadgroup_rwsem``) for writing, and the first writer after an idle
spell waits an RCU grace period (10-15 ms measured here, cgroup v1 and v2 alike, unless a cgroup
mount has ``favordynmods``); a writer that comes while the previous one's grace period is still
"passed" does not wait. A lone placement after an idle spell pays the whole wait between fork and
exec (``bench/agent_start.py``: 18.7 ms with it, 6.1 ms right after another move).

The agent knows a start is likely before it comes: a bid it accepts is followed by the hub's
command some 10-50 ms later. :meth:`CgroupPrimer.expect_start` then has a thread write the agent's
own pid into its own group (a move that changes nothing but takes the lock), once and again every
few ms for :data:`HOLD_S`, so that the child's join finds the fast path open. The price: while
it is open, forks and exits on the machine take the lock's slower read path (what
``favordynmods`` trades all the time); the window is held only after an accepted bid.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from edge_agent.unit_groups import UnitGroups, v1_mount, v2_own_dir

__all__ = ["HOLD_S", "CgroupPrimer", "own_group_procs"]

log = logging.getLogger("edgeplane.agent.cgroups")

HOLD_S = 0.15  # a bid's command comes within this, or the next bid opens it again
PERIOD_S = 0.004  # under a grace period: the path never closes in between


def own_group_procs(mountinfo: str, proc_cgroup: str) -> Path | None:
    """The ``cgroup.procs`` of the agent's own group: in the v2 hierarchy, else in the v1
    ``pids`` hierarchy (``/proc/self/mountinfo``, ``/proc/self/cgroup``); None where neither."""
    own_v2 = v2_own_dir(mountinfo, proc_cgroup)
    if own_v2 is not None:
        return own_v2 / "cgroup.procs"
    mount = v1_mount(mountinfo, "pids")
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if mount is not None and len(parts) == 3 and "pids" in parts[1].split(","):
            return mount / parts[2].lstrip("/") / "cgroup.procs"
    return None


class CgroupPrimer:
    """Keeps the cgroup-move fast path open for :data:`HOLD_S` after :meth:`expect_start`.
    Disabled (a no-op) where units get no cgroups, or after the first write that fails."""

    def __init__(self, procs: Path | None, *, mountinfo: str = "") -> None:
        self.procs = procs
        self._mountinfo = mountinfo
        self._until = 0.0
        self._thread: threading.Thread | None = None
        self._holding = False
        self._wanted = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def detect(cls, groups: UnitGroups) -> CgroupPrimer:
        if not groups.hierarchies:
            return cls(None)
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return cls(None)
        return cls(own_group_procs(mountinfo, proc_cgroup), mountinfo=mountinfo)

    @property
    def enabled(self) -> bool:
        return self.procs is not None

    def expect_start(self) -> None:
        """A unit is likely to start soon: open the path now (in the primer's thread, started
        once and woken here: a thread started per bid cost the bid's answer a millisecond)."""
        if self.procs is None:
            return
        with self._lock:
            self._until = time.monotonic() + HOLD_S
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="cgroup-primer", daemon=True)
                self._thread.start()
        self._wanted.set()

    def _serve(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            self._hold()
            with self._lock:
                if self.procs is None:
                    self._thread = None
                    return

    @property
    def holding(self) -> bool:
        """Whether the path is being held open now (a window that has not closed)."""
        return self._holding

    def _hold(self) -> None:
        self._holding = True
        try:
            self._follow_own_group()
            while True:
                with self._lock:
                    if time.monotonic() >= self._until or self.procs is None:
                        return
                    procs = self.procs
                self._move_self(procs)
                time.sleep(PERIOD_S)
        finally:
            self._holding = False

    def _follow_own_group(self) -> None:
        """Where the agent's group is now (a service manager may have moved it since the start:
        writing the old group would move it back)."""
        if not self._mountinfo:
            return
        try:
            now = own_group_procs(self._mountinfo, Path("/proc/self/cgroup").read_text())
        except OSError:
            now = None
        with self._lock:
            if self.procs is not None:
                self.procs = now

    def _move_self(self, procs: Path) -> None:
        try:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            log.info("cgroup primer off (%s: %s): a start after an idle spell waits", procs, exc)
            with self._lock:
                self.procs = None
