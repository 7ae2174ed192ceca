"""User code confinement on the agent: what a workload or function process starts with.

Every placement and function instance (a *unit*) starts

* with a clean environment: its own ``env``, a minimal ``PATH``, ``HOME``/``TMPDIR`` at its own
  work dir, ``LANG=C.UTF-8`` and the edgeplane variables, never the agent's environment;
* as an unprivileged user when the agent is root (``run_as``, default ``edgeplane-run``, created
  at start if missing, else ``nobody``), with no supplementary groups and ``PR_SET_NO_NEW_PRIVS``;
* in a private group (a gid of its own from :data:`PRIVATE_GIDS`, shared by the instances of one
  function version) that alone may enter its work dir (``root:<gid>``, mode 0770), so one
  workload cannot read or write another's files even though they run as the same user;
* in cgroups of its own (:class:`edge_agent.unit_groups.UnitGroups`): a stop kills every process of
  the unit, ``setsid`` ones included, and ``pids.max`` bounds how many it may have;
* under a seccomp filter (:mod:`edge_agent.seccomp_filter`) that refuses new namespaces, mounts,
  ``ptrace`` and other calls user code never needs, where libseccomp and the kernel allow it.

The agent's own work dir (logs, state, credentials) is made 0700 when code runs as another user;
work dirs live in ``sandbox_root`` when set (``up`` sets ``<data-dir>.sandboxes/<node>``, outside
its private data dir), else beside it (``<work_dir>.sandboxes``), where the run user can reach
that path, else under ``/var/lib/edgeplane/sandboxes``. Python function workers run the agent's
interpreter, or one of the same version where the run user cannot reach it (:func:`worker_python`).
:meth:`Confinement.detect` works out once at start what this machine allows;
:attr:`Confinement.report` says it (sent to the hub at registration) and what could not be
enforced is logged once.

Here: the sandbox lifecycle of a unit (:class:`Confinement`). Who code runs as and what that user
may reach: :mod:`edge_agent.run_user`; the child's environment and its setup between fork and exec:
:mod:`edge_agent.child_process`; private gids: :mod:`edge_agent.private_groups`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from edge_agent.child_process import MINIMAL_PATH, ChildSetup, build_env, child_setup, prctl_available
from edge_agent.private_groups import PRIVATE_GIDS, GroupPool, gids_mapped
from edge_agent.run_user import (
    AGENT_USER,
    DEFAULT_RUN_USER,
    RunUser,
    WorkerPython,
    blocked_at,
    python_blocked_for,
    resolve_run_user,
    worker_python,
)
from edge_agent.seccomp_filter import UnitFilter
from edge_agent.seccomp_filter import detect as detect_seccomp
from edge_agent.spawn import PipedProcess, ProcessHandle, spawn
from edge_agent.spawner import UnitSpawner
from edge_agent.unit_groups import UnitGroups, detect_unit_groups

__all__ = [
    "DEFAULT_RUN_USER",
    "MINIMAL_PATH",
    "PRIVATE_GIDS",
    "Confinement",
    "GroupPool",
    "RunUser",
    "Sandbox",
    "WorkerPython",
    "blocked_at",
    "build_env",
    "child_setup",
    "gids_mapped",
    "isolation_report",
    "python_blocked_for",
    "resolve_run_user",
    "worker_python",
]

log = logging.getLogger("edgeplane.agent.confinement")

SANDBOX_FALLBACK = Path("/var/lib/edgeplane/sandboxes")
# The function worker (stdlib only), installed as a script where the run user can read it.
WORKER_SOURCE = Path(__file__).resolve().parent / "functions" / "worker.py"
RUNTIME_DIR = ".runtime"  # in the sandbox root; unit names cannot start with a dot
SPAWNER_RETRY_S = 30.0  # a unit spawner that died or did not start is tried again this often
_UNIT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def isolation_report(
    *,
    run_user: RunUser,
    private_groups: bool,
    no_new_privs: bool,
    groups: UnitGroups,
    cpu_quota: str,
    python_functions: str,
    seccomp: str,
) -> dict[str, str]:
    """What the agent enforces on user code, as strings (sent to the hub, shown by the API).

    ``seccomp``: ``"yes"`` (units run under :mod:`edge_agent.seccomp_filter`) or ``"none (<why>)"``."""
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
        "seccomp": seccomp,
    }


def _make_reachable(path: Path) -> None:
    """Make the directories of ``path`` that are missing, searchable by anyone (0711: not
    listable): explicit modes, since the agent may run under ``up``'s umask 077. Existing
    directories keep their modes (they are someone's choice). Raises OSError."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        os.chmod(directory, 0o711)


def _unit_name(text: str) -> str:
    """A safe file/cgroup name for a unit id from the wire (a hash when it is not one already)."""
    return text if _UNIT.match(text) else "u-" + hashlib.sha256(text.encode()).hexdigest()[:32]


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
        seccomp: UnitFilter | None = None,
        seccomp_state: str | None = None,
    ) -> None:
        self.sandbox_root = sandbox_root
        self.run_user = run_user
        self.groups = groups or UnitGroups([], pids_max=None)
        self.gid_pool = gid_pool if run_user.drops else None
        self.no_new_privs = no_new_privs and prctl_available()
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
            seccomp=seccomp_state or ("yes" if seccomp is not None else "none (not requested)"),
        )
        self.seccomp = seccomp
        # Forks units' processes instead of the agent once started (start_spawner); None: the agent.
        self.spawner: UnitSpawner | None = None
        self._spawner_wanted = False
        self._spawner_retry_at = 0.0
        self._spawner_task: asyncio.Task[None] | None = None
        self.report["spawner"] = "agent"
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
        sandbox_root: Path | None = None,
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
        unit_filter, seccomp_state = detect_seccomp()
        if unit_filter is None:
            notes.append(f"seccomp: {seccomp_state}")
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
            sandbox_root = cls._sandbox_root(work_dir, key, run_user, notes, wanted=sandbox_root)
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
            sandbox_root = sandbox_root or work_dir / "sandboxes"
        confinement = cls(
            sandbox_root=sandbox_root,
            run_user=run_user,
            groups=groups,
            gid_pool=pool,
            cpu_quota=cpu_quota,
            python=python,
            python_blocked=python_blocked if python is None else None,
            seccomp=unit_filter,
            seccomp_state=seccomp_state,
        )
        if not confinement.no_new_privs:
            notes.append("no_new_privs not set: libc not found")
        log.info("user code isolation: %s", ", ".join(f"{k}={v}" for k, v in confinement.report.items()))
        if notes:
            log.warning("user code isolation not fully enforced: %s", "; ".join(notes))
        return confinement

    @staticmethod
    def _sandbox_root(
        work_dir: Path, key: str, run_user: RunUser, notes: list[str], *, wanted: Path | None = None
    ) -> Path:
        """``wanted`` (the ``sandbox_root`` option), else beside the work dir, where the run user
        can reach it (HOME and TMPDIR are absolute paths), else under /var/lib/edgeplane; never
        inside the agent's own (0700) work dir."""
        assert run_user.uid is not None
        first = wanted or work_dir.with_name(work_dir.name + ".sandboxes")
        # Units run with a private gid: only what the run user owns or anyone may reach counts.
        with contextlib.suppress(OSError):
            _make_reachable(first.parent)
        why = blocked_at(first.parent, uid=run_user.uid, gids=set())
        if why is None:
            return first
        fallback = SANDBOX_FALLBACK / key
        try:
            _make_reachable(SANDBOX_FALLBACK)
            if blocked_at(SANDBOX_FALLBACK, uid=run_user.uid, gids=set()) is None:
                return fallback
        except OSError:
            pass
        notes.append(f"work dirs in {first} are reachable only as the current directory ({why})")
        return first

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

    def setup(
        self, sandbox: Sandbox, *, memory_bytes: int | None, extra_procs: Sequence[Path] = ()
    ) -> ChildSetup:
        """What the child applies before its exec: its cgroups (``extra_procs``: the CPU
        quota's), its limits, then the unprivileged user, no_new_privs and seccomp."""
        return ChildSetup(
            procs=tuple(str(p) for p in [*extra_procs, *sandbox.procs]),
            memory_bytes=memory_bytes,
            uid=self.run_user.uid,
            gid=sandbox.gid if self.run_user.drops else None,
            no_new_privs=self.no_new_privs,
            seccomp=self.seccomp is not None,
        )

    def preexec(
        self, sandbox: Sandbox, *, memory_bytes: int | None, extra_procs: Sequence[Path] = ()
    ) -> Callable[[], None]:
        """The child's ``preexec_fn`` when the agent forks the unit itself."""
        setup = self.setup(sandbox, memory_bytes=memory_bytes, extra_procs=extra_procs)
        return setup.preexec(self.seccomp.load if self.seccomp is not None else None)

    async def start_spawner(self) -> None:
        """Start the unit spawner (:mod:`edge_agent.spawner`); where it cannot start, the agent
        forks units itself and says why once."""
        if self.spawner is not None and self.spawner.alive:
            return
        self._spawner_wanted = True
        self._spawner_retry_at = time.monotonic() + SPAWNER_RETRY_S
        try:
            self.spawner = await UnitSpawner.start(seccomp=self.seccomp is not None)
        except Exception as exc:  # whatever kept it from starting, the agent forks units itself
            self.spawner = None
            log.warning(
                "unit spawner not started (%s): the agent forks units itself", exc or type(exc).__name__
            )
            self.report["spawner"] = "agent"
        else:
            self.report["spawner"] = "fork-server"

    def begin_spawner(self) -> None:
        """Start the unit spawner in the background (the agent's start does not wait for it); a
        unit started meanwhile waits for it (:meth:`launch`)."""
        self._spawner_wanted = True
        self.report["spawner"] = "fork-server"  # as intended; "agent" again if it cannot start
        self._spawner_task = asyncio.create_task(self.start_spawner(), name="unit-spawner")

    async def stop_spawner(self) -> None:
        self._spawner_wanted = False
        if self._spawner_task is not None:
            with contextlib.suppress(Exception):  # its failure was logged; the agent forked units
                await self._spawner_task  # bounded: UnitSpawner.start's own timeout
            self._spawner_task = None
        if self.spawner is not None:
            spawner, self.spawner = self.spawner, None
            await spawner.close()

    def pin_spawner(self, spawner: UnitSpawner | None) -> None:
        """Start units with ``spawner`` (None: the agent forks them) and start no other one: for
        a bench that compares the two paths."""
        self.spawner = spawner
        self._spawner_wanted = spawner is not None
        self._spawner_retry_at = float("inf")

    async def _ready_spawner(self) -> UnitSpawner | None:
        """The unit spawner to start a unit with, or None: the agent forks it. Waits for one
        being started; one that died (or never started) is tried again at most every 30 s."""
        if self._spawner_task is not None and not self._spawner_task.done():
            await asyncio.shield(self._spawner_task)
        if not self._spawner_wanted:
            return None
        if (self.spawner is None or not self.spawner.alive) and time.monotonic() >= self._spawner_retry_at:
            await self.start_spawner()
        if self.spawner is not None and self.spawner.alive:
            return self.spawner
        self.report["spawner"] = "agent"  # what the next registration says
        return None

    async def launch(
        self,
        argv: Sequence[str],
        *,
        sandbox: Sandbox,
        stdout: BinaryIO,
        env: Mapping[str, str],
        memory_bytes: int | None,
        extra_procs: Sequence[Path] = (),
        exit_record: Mapping[str, Any] | None = None,
    ) -> ProcessHandle:
        """Start a unit's process confined (stdout and stderr to ``stdout``): through the unit
        spawner while it runs, else forked by the agent off its loop (:func:`spawn`). Raises what
        ``Popen`` raises (OSError, SubprocessError, ValueError). ``exit_record``: the spawner writes
        it when the process ends (:mod:`edge_agent.exit_records`); the agent's own fork has none."""
        setup = self.setup(sandbox, memory_bytes=memory_bytes, extra_procs=extra_procs)
        spawner = await self._ready_spawner()
        if spawner is not None:
            return await spawner.spawn(
                argv,
                stdout=stdout.fileno(),
                cwd=str(sandbox.home),
                env=env,
                setup=setup,
                exit_record=exit_record,
            )
        return await spawn(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            cwd=str(sandbox.home),
            env=env,
            start_new_session=True,
            preexec_fn=setup.preexec(self.seccomp.load if self.seccomp is not None else None),
        )

    async def launch_piped(
        self,
        argv: Sequence[str],
        *,
        sandbox: Sandbox,
        stderr: BinaryIO,
        env: Mapping[str, str],
        limit: int,
    ) -> PipedProcess:
        """Start a unit's process confined with its stdin and stdout as pipes to the agent
        (asyncio streams; ``limit``: the reader's line limit) and its stderr to ``stderr``: a
        function worker. Through the unit spawner while it runs, else forked by the agent."""
        setup = self.setup(sandbox, memory_bytes=None)
        spawner = await self._ready_spawner()
        if spawner is None:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=str(sandbox.home),
                env=env,
                start_new_session=True,
                preexec_fn=setup.preexec(self.seccomp.load if self.seccomp is not None else None),
                limit=limit,
            )
        loop = asyncio.get_running_loop()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            process = await spawner.spawn(
                argv,
                stdin=in_r,
                stdout=out_w,
                stderr=stderr.fileno(),
                cwd=str(sandbox.home),
                env=env,
                setup=setup,
            )
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            os.close(in_r)  # the child's ends: it has its own copies now
            os.close(out_w)
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(out_r, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(in_w, "wb", 0)
        )
        process.stdout = reader
        process.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        if process.returncode is not None:  # it ended before its pipes were wired
            process.stdin.close()
        return process

    async def stop(self, sandbox: Sandbox, process: ProcessHandle, *, grace_s: float) -> None:
        """SIGTERM the unit's processes, SIGKILL all that remain after ``grace_s`` (or as soon
        as the main process is gone: its descendants go with it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        self.groups.signal(sandbox.unit, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=grace_s)
        await self.kill(sandbox, process)

    async def kill(self, sandbox: Sandbox, process: ProcessHandle | None) -> None:
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
