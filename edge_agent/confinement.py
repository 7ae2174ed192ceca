"""User code confinement on the agent: what a workload or function process starts with.

Every placement and function instance (a *unit*) starts

* with a clean environment: its own ``env``, a minimal ``PATH``, ``HOME``/``TMPDIR`` at its own
  work dir, ``LANG=C.UTF-8`` and the edgeplane variables, never the agent's environment;
* as an unprivileged user when the agent is root (``run_as``, default ``edgeplane-run``, created
  at start if missing, else ``nobody``), with no supplementary groups and ``PR_SET_NO_NEW_PRIVS``;
* in a private group (a gid of its own from :data:`PRIVATE_GIDS`, shared by the instances of one
  function version) that alone may enter its work dir (``root:<gid>``, mode 0770), so one
  workload cannot read or write another's files even though they run as the same user;
* in cgroups of its own (:class:`edge_agent.cgroups.UnitGroups`): a stop kills every process of
  the unit, ``setsid`` ones included, and ``pids.max`` bounds how many it may have.

The agent's own work dir (logs, state, credentials) is made 0700 when code runs as another user;
work dirs live beside it (``<work_dir>.sandboxes``) where the run user can reach that path, else
under ``/var/lib/edgeplane/sandboxes``. Python function workers run the agent's interpreter, or
one of the same version where the run user cannot reach it (:func:`worker_python`).
:meth:`Confinement.detect` works out once at start what this machine allows;
:attr:`Confinement.report` says it (sent to the hub at registration) and what could not be
enforced is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import hashlib
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.cgroups import UnitGroups, detect_unit_groups

__all__ = [
    "DEFAULT_RUN_USER",
    "MINIMAL_PATH",
    "Confinement",
    "GroupPool",
    "RunUser",
    "Sandbox",
    "WorkerPython",
    "blocked_at",
    "build_env",
    "child_setup",
    "isolation_report",
    "python_blocked_for",
    "resolve_run_user",
    "worker_python",
]

log = logging.getLogger("edgeplane.agent.confinement")

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_RUN_USER = "edgeplane-run"
AS_AGENT = ("", "agent")  # run_as values that mean "the agent's own user" (an explicit opt-out)
# Private gids: above every login and systemd range (dynamic users, nspawn containers end at
# 0x6FFFFFFF), below 2^31. A gid named in the group database is skipped.
PRIVATE_GIDS = range(0x7000_0000, 0x7000_0000 + 2**20)
SANDBOX_FALLBACK = Path("/var/lib/edgeplane/sandboxes")
# The function worker (stdlib only), installed as a script where the run user can read it.
WORKER_SOURCE = Path(__file__).resolve().parent / "functions" / "worker.py"
RUNTIME_DIR = ".runtime"  # in the sandbox root; unit names cannot start with a dot

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_UNIT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

_libc: Any = None
if sys.platform.startswith("linux"):
    try:
        import ctypes

        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover
        _libc = None

try:
    import resource as _resource
except ImportError:  # pragma: no cover - not on POSIX
    _resource = None  # type: ignore[assignment]


# --- pure parts --------------------------------------------------------------------------------


def build_env(own: Mapping[str, str], *, home: str, edgeplane: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a unit: defaults, then its own ``env``, then the edgeplane
    variables (which its ``env`` cannot override). Nothing comes from the agent's environment."""
    env = {"PATH": MINIMAL_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
    env.update(own)
    env.update(edgeplane)
    return env


@dataclass(frozen=True, slots=True)
class RunUser:
    """Who user code runs as: ``uid``/``gid`` None means the agent's own user (nothing dropped)."""

    name: str
    uid: int | None = None
    gid: int | None = None

    @property
    def drops(self) -> bool:
        return self.uid is not None


AGENT_USER = RunUser("agent-user")


def isolation_report(
    *,
    run_user: RunUser,
    private_groups: bool,
    no_new_privs: bool,
    groups: UnitGroups,
    cpu_quota: str,
    python_functions: str,
) -> dict[str, str]:
    """What the agent enforces on user code, as strings (sent to the hub, shown by the API)."""
    if run_user.drops:
        work_dirs = "private-group" if private_groups else "run-user"
    else:
        work_dirs = "agent-user"
    return {
        "clean_env": "yes",
        "run_as": run_user.name if run_user.drops else "agent-user",
        "work_dirs": work_dirs,
        "no_new_privs": "yes" if no_new_privs else "no",
        "cgroup": groups.label,
        "kill_tree": groups.kill_tree,
        "pids_limit": str(groups.pids_max) if groups.pids_max is not None else "none",
        "cpu_quota": cpu_quota,
        "python_functions": python_functions,
    }


def _may(st: os.stat_result, uid: int, gids: set[int], bits: int) -> bool:
    """Whether ``uid`` with ``gids`` has the rwx ``bits`` (4, 2, 1 combined) on a file."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        shift = 6
    elif st.st_gid in gids:
        shift = 3
    else:
        shift = 0
    return (st.st_mode >> shift) & bits == bits


def blocked_at(path: Path, *, uid: int, gids: set[int], bits: int = 1) -> str | None:
    """Why ``uid`` cannot reach ``path`` with ``bits`` on it (every directory on the way must be
    searchable, symlinks followed), or None when it can. Mode bits only (no ACLs)."""
    for candidate in dict.fromkeys([path.absolute(), path.resolve()]):
        walked = Path(candidate.anchor)
        for part in candidate.parts[1:]:
            try:
                if not _may(walked.stat(), uid, gids, 1):
                    return f"{walked} is not searchable"
            except OSError as exc:
                return f"{walked}: {exc.strerror or exc}"
            walked = walked / part
        try:
            if not _may(candidate.stat(), uid, gids, bits):
                return f"{candidate} has mode {stat.filemode(candidate.stat().st_mode)}"
        except OSError as exc:
            return f"{candidate}: {exc.strerror or exc}"
    return None


def gids_mapped(gid_map: str, gids: range) -> bool:
    """Whether ``/proc/self/gid_map`` (``inside outside count`` lines) maps all of ``gids``."""
    for line in gid_map.splitlines():
        parts = line.split()
        if len(parts) == 3:
            inside, _, count = (int(p) for p in parts)
            if inside <= gids.start and gids.stop <= inside + count:
                return True
    return False


def _unit_name(text: str) -> str:
    """A safe file/cgroup name for a unit id from the wire (a hash when it is not one already)."""
    return text if _UNIT.match(text) else "u-" + hashlib.sha256(text.encode()).hexdigest()[:32]


class GroupPool:
    """Private gids keyed by unit (or function version): ``hash(key)`` into :data:`PRIVATE_GIDS`,
    probing past gids in use here or named in the group database. Reference counted."""

    def __init__(self, gids: range = PRIVATE_GIDS, *, named: Callable[[int], bool] | None = None) -> None:
        self.gids = gids
        self.named = named or _gid_named
        self._held: dict[str, tuple[int, int]] = {}  # key -> (gid, references)

    def acquire(self, key: str) -> int:
        if key in self._held:
            gid, refs = self._held[key]
            self._held[key] = (gid, refs + 1)
            return gid
        used = {gid for gid, _ in self._held.values()}
        start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % len(self.gids)
        for step in range(len(self.gids)):
            gid = self.gids[(start + step) % len(self.gids)]
            if gid not in used and not self.named(gid):
                self._held[key] = (gid, 1)
                return gid
        raise OSError("no free private gid")

    def release(self, key: str) -> None:
        if key not in self._held:
            return
        gid, refs = self._held[key]
        if refs <= 1:
            del self._held[key]
        else:
            self._held[key] = (gid, refs - 1)


def _gid_named(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


# --- the child, between fork and exec ----------------------------------------------------------


def child_setup(
    *,
    procs: Sequence[str],
    memory_bytes: int | None,
    uid: int | None,
    gid: int | None,
    parent_pid: int,
    no_new_privs: bool = True,
) -> Callable[[], None]:
    """The ``preexec_fn`` of every unit: join its cgroups and set limits (best effort, as root),
    then drop to ``uid``/``gid`` (raises if that fails: the exec must not happen), then set
    PR_SET_PDEATHSIG (after the drop: a credential change clears it) and PR_SET_NO_NEW_PRIVS."""

    def apply() -> None:
        for path in procs:
            # "0" moves the writing process itself; before the exec, so no instruction runs outside.
            try:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except Exception:
                pass
        if _resource is not None and memory_bytes is not None:
            try:
                _resource.setrlimit(_resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            except Exception:
                pass
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
        if _libc is not None:
            zero = ctypes.c_ulong(0)
            _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero)
            if os.getppid() != parent_pid:  # the agent died before the line above: die too
                os._exit(137)
            if no_new_privs and _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), zero, zero, zero):
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")

    return apply


# --- run user ----------------------------------------------------------------------------------


def _create_user(name: str) -> str | None:
    """``useradd`` a system user without a home or a login shell; an error message or None."""
    try:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        return None


def resolve_run_user(run_as: str, *, euid: int | None = None) -> tuple[RunUser, list[str]]:
    """Who user code runs as, and what that leaves unenforced (one line each).

    Not root: the agent's user (there is nothing to drop). ``run_as`` "" or "agent": the agent's
    user, on purpose. Else the named user; the default one is created when missing; a user that
    cannot be had falls back to ``nobody``, never to the agent's user.
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return AGENT_USER, [f"the agent is not root: user code runs as the agent's user (uid {euid})"]
    if run_as in AS_AGENT:
        return AGENT_USER, [f"run_as {run_as!r}: user code runs as the agent's user (root), by request"]
    entry = _lookup(run_as)
    notes: list[str] = []
    if entry is None and run_as == DEFAULT_RUN_USER:
        error = _create_user(run_as)
        entry = _lookup(run_as)  # another agent may have created it meanwhile
        if entry is None:
            notes.append(f"could not create user {run_as} ({error}): user code runs as nobody")
    elif entry is None:
        notes.append(f"no user {run_as!r}: user code runs as nobody")
    if entry is None:
        entry = _lookup("nobody")
        if entry is None:
            return RunUser("nobody", 65534, 65534), notes
    if entry.pw_uid == 0:
        return AGENT_USER, [f"run_as {run_as!r} is root: user code runs as root"]
    return RunUser(entry.pw_name, entry.pw_uid, entry.pw_gid), notes


# --- units -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Sandbox:
    """One unit's confinement: its work dir (``home``), its gid (None: unchanged) and cgroups."""

    unit: str
    home: Path
    gid: int | None
    group_key: str
    procs: list[Path] = field(default_factory=list)


class Confinement:
    """Everything the agent does to start, stop and clean up a unit confined (see the module)."""

    def __init__(
        self,
        *,
        sandbox_root: Path,
        run_user: RunUser = AGENT_USER,
        groups: UnitGroups | None = None,
        gid_pool: GroupPool | None = None,
        no_new_privs: bool = True,
        cpu_quota: str = "none",
        python: WorkerPython | None = None,
        python_blocked: str | None = None,
    ) -> None:
        self.sandbox_root = sandbox_root
        self.run_user = run_user
        self.groups = groups or UnitGroups([], pids_max=None)
        self.gid_pool = gid_pool if run_user.drops else None
        self.no_new_privs = no_new_privs and _libc is not None
        # The interpreter Python function workers run (None: they cannot run, for python_blocked).
        self.python = python if python is not None or python_blocked else worker_python(None)[0]
        self.python_blocked = python_blocked if self.python is None else None
        self.report = isolation_report(
            run_user=run_user,
            private_groups=self.gid_pool is not None,
            no_new_privs=self.no_new_privs,
            groups=self.groups,
            cpu_quota=cpu_quota,
            python_functions=self.python.kind if self.python is not None else "no",
        )
        self._agent_uid = os.geteuid()
        self._make_dir(sandbox_root, 0o711 if run_user.drops else 0o700)

    @classmethod
    def unconfined(cls, work_dir: Path) -> Confinement:
        """As the agent's user, no cgroups: what a bare runner (tests, tools) gets."""
        return cls(sandbox_root=work_dir / "sandboxes")

    @classmethod
    def detect(
        cls,
        *,
        node: str,
        work_dir: Path,
        run_as: str = DEFAULT_RUN_USER,
        pids_max: int | None = 512,
        cgroup_root: str = "",
        cpu_quota: str = "none",
    ) -> Confinement:
        """What this machine allows, worked out once at the agent's start; logs what it is not."""
        work_dir = work_dir.absolute()
        key = f"{node}.{hashlib.sha1(str(work_dir).encode()).hexdigest()[:8]}"
        run_user, notes = resolve_run_user(run_as)
        groups, cgroup_notes = detect_unit_groups(key, cgroup_root=cgroup_root, pids_max=pids_max)
        notes += cgroup_notes
        pool: GroupPool | None = None
        python, python_blocked = worker_python(run_user)
        if run_user.drops:
            assert run_user.uid is not None and run_user.gid is not None
            try:
                mapped = gids_mapped(Path("/proc/self/gid_map").read_text(), PRIVATE_GIDS)
            except OSError:
                mapped = True  # no user namespaces: every gid is valid
            if mapped:
                pool = GroupPool()
            else:
                notes.append("private gids not mapped in this user namespace: workloads share one group")
            # The agent's own files: no one else's business, whatever their modes.
            work_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(work_dir, 0o700)
            sandbox_root = cls._sandbox_root(work_dir, key, run_user, notes)
            if python is None:
                notes.append(
                    f"python functions cannot start: {run_user.name} cannot run {sys.executable} "
                    f"({python_blocked}); install Python where that user can read it, or set run_as: agent"
                )
            elif python.kind == "other":
                log.warning(
                    "python functions run %s (the same version): %s cannot run %s (%s)",
                    python.executable,
                    run_user.name,
                    sys.executable,
                    python_blocked,
                )
        else:
            sandbox_root = work_dir / "sandboxes"
        confinement = cls(
            sandbox_root=sandbox_root,
            run_user=run_user,
            groups=groups,
            gid_pool=pool,
            cpu_quota=cpu_quota,
            python=python,
            python_blocked=python_blocked if python is None else None,
        )
        if not confinement.no_new_privs:
            notes.append("no_new_privs not set: libc not found")
        log.info("user code isolation: %s", ", ".join(f"{k}={v}" for k, v in confinement.report.items()))
        if notes:
            log.warning("user code isolation not fully enforced: %s", "; ".join(notes))
        return confinement

    @staticmethod
    def _sandbox_root(work_dir: Path, key: str, run_user: RunUser, notes: list[str]) -> Path:
        """Beside the work dir where the run user can reach it (HOME and TMPDIR are absolute
        paths), else under /var/lib/edgeplane; never inside the agent's own (0700) work dir."""
        assert run_user.uid is not None
        beside = work_dir.with_name(work_dir.name + ".sandboxes")
        # Units run with a private gid: only what the run user owns or anyone may reach counts.
        why = blocked_at(work_dir.parent, uid=run_user.uid, gids=set())
        if why is None:
            return beside
        fallback = SANDBOX_FALLBACK / key
        try:
            SANDBOX_FALLBACK.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            SANDBOX_FALLBACK.mkdir(mode=0o711, exist_ok=True)
            if blocked_at(SANDBOX_FALLBACK, uid=run_user.uid, gids=set()) is None:
                return fallback
        except OSError:
            pass
        notes.append(f"work dirs in {beside} are reachable only as the current directory ({why})")
        return beside

    # -- per unit --------------------------------------------------------------------------------

    def _make_dir(self, path: Path, mode: int, gid: int | None = None) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if gid is not None and self.run_user.drops:
            os.chown(path, self._agent_uid, gid)
        os.chmod(path, mode)

    def open(self, unit_id: str, *, group_key: str | None = None) -> Sandbox:
        """Make (or, after a restart, reuse) the unit's work dir, gid and cgroups; raises OSError."""
        unit = _unit_name(unit_id)
        key = group_key or unit
        gid: int | None = None
        if self.gid_pool is not None:
            gid = self.gid_pool.acquire(key)
        elif self.run_user.drops:
            gid = self.run_user.gid
        sandbox = Sandbox(unit=unit, home=self.sandbox_root / unit, gid=gid, group_key=key)
        try:
            if self.gid_pool is not None:
                # root:<private gid> 0770: only this unit's processes may enter, none may chmod it.
                self._make_dir(sandbox.home, 0o770, gid)
            else:
                sandbox.home.mkdir(mode=0o700, exist_ok=True)
                if self.run_user.drops:
                    assert self.run_user.uid is not None and gid is not None
                    os.chown(sandbox.home, self.run_user.uid, gid)
                os.chmod(sandbox.home, 0o700)
            sandbox.procs = self.groups.prepare(unit)
        except OSError:
            self.close(sandbox, remove_home=False)
            raise
        return sandbox

    def code_dir(self, name: str, sandbox: Sandbox) -> Path:
        """A read-only directory for code the unit runs (a function version's source): the agent
        writes it, the unit's group may only read it (0750), so code cannot change under it."""
        path = self.sandbox_root / _unit_name(f"code-{name}")
        self._make_dir(path, 0o750 if self.run_user.drops else 0o700, sandbox.gid)
        return path

    def write_code(self, path: Path, text: str, sandbox: Sandbox) -> None:
        """Write ``text`` to ``path`` in a :meth:`code_dir` (mode 0640, group of the unit)."""
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        if sandbox.gid is not None and self.run_user.drops:
            os.chown(path, self._agent_uid, sandbox.gid)
        os.chmod(path, 0o640)

    def env(self, sandbox: Sandbox, own: Mapping[str, str], edgeplane: Mapping[str, str]) -> dict[str, str]:
        return build_env(
            own, home=str(sandbox.home), edgeplane={**edgeplane, "EDGEPLANE_WORK_DIR": str(sandbox.home)}
        )

    def preexec(
        self, sandbox: Sandbox, *, memory_bytes: int | None, extra_procs: Sequence[Path] = ()
    ) -> Callable[[], None]:
        """The child's ``preexec_fn``: its cgroups (``extra_procs``: the CPU quota's), its limits,
        then the unprivileged user."""
        return child_setup(
            procs=[str(p) for p in [*extra_procs, *sandbox.procs]],
            memory_bytes=memory_bytes,
            uid=self.run_user.uid,
            gid=sandbox.gid if self.run_user.drops else None,
            parent_pid=os.getpid(),
            no_new_privs=self.no_new_privs,
        )

    async def stop(self, sandbox: Sandbox, process: asyncio.subprocess.Process, *, grace_s: float) -> None:
        """SIGTERM the unit's processes, SIGKILL all that remain after ``grace_s`` (or as soon
        as the main process is gone: its descendants go with it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        self.groups.signal(sandbox.unit, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=grace_s)
        await self.kill(sandbox, process)

    async def kill(self, sandbox: Sandbox, process: asyncio.subprocess.Process | None) -> None:
        """SIGKILL every process of the unit (its cgroup, else its process group); reap the main one."""
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        elif process is not None and not self.groups.hierarchies:
            # The leader is gone but its group may not be: the fallback's best effort.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        await self.groups.kill(sandbox.unit)
        if process is not None:
            await process.wait()

    def close(self, sandbox: Sandbox, *, remove_home: bool = True) -> None:
        """Release the unit's cgroups and gid and remove its work dir (its processes are gone)."""
        self.groups.release(sandbox.unit)
        if self.gid_pool is not None:
            self.gid_pool.release(sandbox.group_key)
        if remove_home:
            # fd-based rmtree: a symlink the unit left inside is removed, never followed.
            shutil.rmtree(sandbox.home, ignore_errors=True)

    def discard(self, unit_id: str) -> None:
        """Remove the work dir a unit left (one that will not run again)."""
        home = self.sandbox_root / _unit_name(unit_id)
        if home.is_dir() and not home.is_symlink():
            shutil.rmtree(home, ignore_errors=True)

    def prune(self, keep: set[str]) -> None:
        """Remove work dirs a previous run of this agent left, except the units in ``keep``."""
        kept = {_unit_name(k) for k in keep}
        with contextlib.suppress(OSError):
            for path in self.sandbox_root.iterdir():
                if path.name in kept or path.name == RUNTIME_DIR:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)

    def shutdown(self) -> None:
        """The agent stops, and its units with it: their groups and work dirs go, function code too."""
        self.groups.close()
        shutil.rmtree(self.sandbox_root, ignore_errors=True)

    def worker_script(self) -> Path:
        """The function worker as a script the run user can read, (re)installed when missing or
        stale: the edgeplane package itself may sit where that user cannot go (a checkout under
        /root, a 0700 temporary directory). Owned by the agent, read-only to units."""
        folder = self.sandbox_root / RUNTIME_DIR
        script = folder / "worker.py"
        text = WORKER_SOURCE.read_text(encoding="utf-8")
        with contextlib.suppress(OSError):
            if script.read_text(encoding="utf-8") == text:
                return script
        self._make_dir(folder, 0o711)
        staged = folder / f".worker.{os.getpid()}.tmp"
        staged.write_text(text, encoding="utf-8")
        os.chmod(staged, 0o644)
        os.replace(staged, script)
        return script

    def worker_env(self) -> dict[str, str]:
        """Variables a Python function worker needs in a clean environment."""
        env = {"PYTHONUNBUFFERED": "1"}
        if self.python is not None and self.python.path:
            env["PYTHONPATH"] = os.pathsep.join(self.python.path)
        return env


def python_blocked_for(run_user: RunUser) -> str | None:
    """Why ``run_user`` (with a private gid: its own groups do not count) cannot run this
    interpreter and its standard library, or None. (The worker needs nothing else: it runs as a
    script the agent installs, see :meth:`Confinement.worker_script`.)"""
    assert run_user.uid is not None
    uid, gids = run_user.uid, set[int]()
    return blocked_at(Path(sys.executable), uid=uid, gids=gids, bits=5) or blocked_at(
        Path(os.__file__).parent, uid=uid, gids=gids, bits=5
    )


@dataclass(frozen=True, slots=True)
class WorkerPython:
    """The interpreter function workers run: ``kind`` "yes" for the agent's own, "other" for one
    of the same version the run user can run where it cannot run the agent's (an interpreter
    under /root); ``path``: the ``PYTHONPATH`` it needs (for another interpreter, the agent's
    site-packages where the run user can read them, so handlers import what the agent's could)."""

    executable: str
    path: tuple[str, ...] = ()
    kind: str = "yes"


def worker_python(run_user: RunUser | None) -> tuple[WorkerPython | None, str | None]:
    """The interpreter function workers of ``run_user`` run (None: they cannot), and why the
    agent's own was not usable (None when it is)."""
    if run_user is None or not run_user.drops:
        return WorkerPython(sys.executable), None
    why = python_blocked_for(run_user)
    if why is None:
        return WorkerPython(sys.executable), None
    assert run_user.uid is not None
    uid, gids = run_user.uid, set[int]()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    other = shutil.which(version, path=MINIMAL_PATH)
    if (
        other is None
        or Path(other).resolve() == Path(sys.executable).resolve()
        or blocked_at(Path(other), uid=uid, gids=gids, bits=5) is not None
    ):
        return None, why
    paths = sysconfig.get_paths()
    extra = [Path(paths[key]) for key in ("purelib", "platlib")]
    usable = [str(p) for p in extra if p.is_dir() and blocked_at(p, uid=uid, gids=gids, bits=5) is None]
    return WorkerPython(other, tuple(dict.fromkeys(usable)), "other"), why
