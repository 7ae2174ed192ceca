"""Groups of its own for every unit (a placement, a function instance): all its processes found
and killed, their number bounded.

cgroup v2 (the delegated directory, else under the agent's own v2 group, e.g. a hybrid machine's
``unified`` mount) with ``cgroup.kill``, and ``pids.max`` where the pids controller is available
(v2, else the v1 ``pids`` hierarchy). Without any, a stop falls back to the process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Hierarchy", "UnitGroups", "detect_unit_groups", "favors_dynamic_moves", "v1_mount", "v2_own_dir"]

log = logging.getLogger("edgeplane.agent.cgroups")


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One cgroup hierarchy the agent makes unit groups in: ``<root>/<unit>``.

    ``kill``: the groups have ``cgroup.kill`` (v2, Linux 5.14+); ``pids``: they have ``pids.max``.
    """

    root: Path
    version: int
    pids: bool
    kill: bool


def v2_own_dir(mountinfo: str, proc_cgroup: str) -> Path | None:
    """Where the calling process's own cgroup v2 group is in the file system, or None.

    ``mountinfo`` is ``/proc/self/mountinfo``, ``proc_cgroup`` is ``/proc/self/cgroup``: the
    ``0::<path>`` line, mapped through the mount's own root (a container may mount a sub-tree).
    """
    own = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    if own is None:
        return None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep or not tail.startswith("cgroup2 "):
            continue
        fields = head.split()
        if len(fields) < 5:
            continue
        mount_root, mount_point = fields[3], fields[4]
        relative = os.path.relpath(own, mount_root)
        if relative.startswith(".."):
            continue  # our group is not visible through this mount
        return Path(mount_point) / relative if relative != "." else Path(mount_point)
    return None


def v1_mount(mountinfo: str, controller: str) -> Path | None:
    """The mount point of the cgroup v1 hierarchy that has ``controller``, or None."""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        parts = tail.split()
        if sep and len(parts) >= 3 and parts[0] == "cgroup" and controller in parts[2].split(","):
            fields = head.split()
            if len(fields) >= 5:
                return Path(fields[4])
    return None


def favors_dynamic_moves(mountinfo: str) -> bool:
    """Whether a cgroup mount in ``mountinfo`` has ``favordynmods`` (Linux 6.0+): without it, the
    first move of a process between cgroups after an idle spell waits an RCU grace period (about
    10 ms measured, on v1 and v2 alike), which every unit's start pays before its exec."""
    for line in mountinfo.splitlines():
        _, sep, tail = line.partition(" - ")
        fields = tail.split()
        if sep and fields and fields[0] in ("cgroup", "cgroup2") and "favordynmods" in fields[-1].split(","):
            return True
    return False


def _procs(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _enable(group: Path, controller: str) -> bool:
    """Let ``group``'s children use ``controller`` (it must be in its cgroup.controllers)."""
    try:
        if controller not in (group / "cgroup.controllers").read_text().split():
            return False
        if controller not in (group / "cgroup.subtree_control").read_text().split():
            (group / "cgroup.subtree_control").write_text(f"+{controller}")
        return True
    except OSError:
        return False


def _kill_now(group: Path, *, rounds: int = 200) -> bool:
    """SIGKILL everything in ``group`` until it is empty (a forking process is caught on a later
    round); True when it emptied. For the agent's start, before any event loop work."""
    for _ in range(rounds):
        pids = _procs(group)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return not _procs(group)


class UnitGroups:
    """A cgroup per unit (a placement or a function instance) in each usable hierarchy.

    The child joins every ``prepare``\\ d group before exec (:func:`edge_agent.child_process.child_setup`),
    so all its descendants, ``setsid`` or not, stay inside: :meth:`kill` ends them all through
    ``cgroup.kill`` where a hierarchy has it, else by SIGKILLing ``cgroup.procs`` until empty.
    ``pids.max`` bounds the unit's processes where a hierarchy has the pids controller.
    """

    def __init__(self, hierarchies: list[Hierarchy], *, pids_max: int | None) -> None:
        self.hierarchies = hierarchies
        self.pids_max = pids_max if any(h.pids for h in hierarchies) else None

    @property
    def kill_tree(self) -> str:
        return "cgroup" if self.hierarchies else "process-group"

    @property
    def label(self) -> str:
        versions = sorted({h.version for h in self.hierarchies})
        return "+".join(f"v{v}" for v in versions) or "none"

    def prepare(self, unit: str) -> list[Path]:
        """Make the unit's groups (again, after a restart: they may exist); their cgroup.procs files."""
        procs: list[Path] = []
        for hierarchy in self.hierarchies:
            group = hierarchy.root / unit
            group.mkdir(parents=True, exist_ok=True)
            if hierarchy.pids and self.pids_max is not None:
                (group / "pids.max").write_text(str(self.pids_max))
            procs.append(group / "cgroup.procs")
        return procs

    def pids(self, unit: str) -> list[int]:
        """The processes in the unit's group (the first hierarchy's view: they all hold the same)."""
        return _procs(self.hierarchies[0].root / unit) if self.hierarchies else []

    async def kill(self, unit: str, *, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process of the unit; True when its groups are empty (bounded wait)."""
        if not self.hierarchies:
            return True
        killer = next((h for h in self.hierarchies if h.kill), None)
        group = (killer or self.hierarchies[0]).root / unit
        if killer is not None:
            with contextlib.suppress(OSError):
                (group / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + timeout_s
        while True:
            pids = _procs(group)
            if not pids:
                return True
            if time.monotonic() > deadline:
                log.warning("unit %s: %d process(es) still in %s after SIGKILL", unit, len(pids), group)
                return False
            if killer is None:  # v1: kill what is there now; a fork in between is caught next round
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.01)

    def signal(self, unit: str, signum: int) -> None:
        """Send ``signum`` to every process of the unit (the polite SIGTERM before a kill)."""
        for pid in self.pids(unit):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def release(self, unit: str) -> None:
        """Remove the unit's groups; one still holding a process (EBUSY) stays for the next start."""
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError):
                (hierarchy.root / unit).rmdir()

    def close(self) -> None:
        """Remove the agent's own (empty) directories on shutdown."""
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError):
                hierarchy.root.rmdir()


def _clear_stale(root: Path) -> None:
    """Empty and remove the unit groups a previous run of this agent left in ``root``: their
    processes outlived it (only the direct child dies with the agent). A group holding the agent
    itself (a misconfigured delegation) is left alone."""
    for stale in root.iterdir():
        if stale.is_dir() and os.getpid() not in _procs(stale):
            _kill_now(stale)
            with contextlib.suppress(OSError):
                stale.rmdir()


def _own_root(base: Path, agent_key: str) -> Path:
    """``<base>/edgeplane/<agent_key>``, without what a previous run of this agent left."""
    root = base / "edgeplane" / agent_key
    root.mkdir(parents=True, exist_ok=True)
    _clear_stale(root)
    return root


def _probe(hierarchy: Hierarchy, pids_max: int | None) -> None:
    probe = UnitGroups([hierarchy], pids_max=pids_max)
    unit = f"probe-{os.getpid()}"
    try:
        probe.prepare(unit)
    finally:
        probe.release(unit)


def detect_unit_groups(
    agent_key: str,
    *,
    cgroup_root: str = "",
    pids_max: int | None = 512,
    mountinfo: Path = Path("/proc/self/mountinfo"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
) -> tuple[UnitGroups, list[str]]:
    """The unit groups this machine allows, and what could not be had (one line each); never raises.

    cgroup v2: the delegated ``cgroup_root`` if given (units directly under it, as for CPU quotas),
    else ``edgeplane/<agent_key>`` under the agent's own v2 group where writable (a hybrid
    machine's ``unified`` mount included). cgroup v1 ``pids``: ``edgeplane/<agent_key>`` under its
    mount, for the pids limit when v2 has no pids controller. ``agent_key`` names this agent's
    groups (node name and work dir), so agents sharing a machine never touch each other's.
    """
    notes: list[str] = []
    hierarchies: list[Hierarchy] = []
    v2_error = ""
    try:
        mounts = mountinfo.read_text()
    except OSError:
        mounts = ""
    v2_pids = False
    try:
        if cgroup_root:
            root = Path(cgroup_root)
            _clear_stale(root)
            v2_pids = _enable(root, "pids")
        else:
            own = v2_own_dir(mounts, proc_cgroup.read_text())
            if own is None:
                raise OSError("no cgroup v2 hierarchy mounted")
            root = _own_root(own, agent_key)
            # Our own directories hold no process, so they may pass controllers down.
            v2_pids = _enable(root.parent, "pids") and _enable(root, "pids")
        if not os.access(root, os.W_OK):
            raise OSError(f"{root} is not writable")
        # cgroup.kill exists in every non-root v2 group on Linux 5.14+: look in a probe group.
        probe = root / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        try:
            kill = (probe / "cgroup.kill").exists()
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
        v2 = Hierarchy(root=root, version=2, pids=v2_pids, kill=kill)
        _probe(v2, pids_max)
        hierarchies.append(v2)
        if not kill:
            notes.append("cgroup v2 without cgroup.kill (Linux < 5.14): processes are killed one by one")
    except OSError as exc:
        v2_error = f"cgroup v2: {exc}"
    if not v2_pids:
        try:
            mount = v1_mount(mounts, "pids")
            if mount is None:
                raise OSError("no cgroup v1 pids hierarchy mounted")
            if not os.access(mount, os.W_OK):
                raise OSError(f"{mount} is not writable")
            v1 = Hierarchy(root=_own_root(mount, agent_key), version=1, pids=True, kill=False)
            _probe(v1, pids_max)
            hierarchies.append(v1)
        except OSError as exc:
            if pids_max is not None:
                notes.append(f"pids limit not enforced: no pids controller in cgroup v2, v1: {exc}")
    groups = UnitGroups(hierarchies, pids_max=pids_max)
    if hierarchies and not favors_dynamic_moves(mounts):
        # Not a confinement gap, a start-latency one: the host's choice, so said, not changed.
        log.info(
            "unit starts may wait ~10 ms for an RCU grace period to join their cgroups; "
            "mounting cgroup2 with favordynmods (Linux 6.0+) avoids it"
        )
    if not hierarchies:
        notes.append(
            f"no cgroup per workload ({v2_error}): a stop kills the process group only, "
            "so a setsid child escapes it"
        )
    return groups, notes
