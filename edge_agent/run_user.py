"""Who user code runs as (:func:`resolve_run_user`), what that user may reach (:func:`blocked_at`),
and which Python interpreter its function workers can run (:func:`worker_python`)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from edge_agent.child_process import MINIMAL_PATH

__all__ = [
    "AGENT_USER",
    "AS_AGENT",
    "DEFAULT_RUN_USER",
    "RunUser",
    "WorkerPython",
    "blocked_at",
    "python_blocked_for",
    "resolve_run_user",
    "worker_python",
]

DEFAULT_RUN_USER = "edgeplane-run"
AS_AGENT = ("", "agent")  # run_as values that mean "the agent's own user" (an explicit opt-out)


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
