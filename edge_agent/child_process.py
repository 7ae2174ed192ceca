"""What a unit's process starts with: its whole environment, and the setup its child runs between
fork and exec (cgroups, limits, the unprivileged user, PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS,
the seccomp filter)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MINIMAL_PATH", "ChildSetup", "build_env", "child_setup", "die_with_parent", "prctl_available"]

MINIMAL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38

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


def prctl_available() -> bool:
    """Whether the child can set PR_SET_PDEATHSIG and PR_SET_NO_NEW_PRIVS (libc was found)."""
    return _libc is not None


def build_env(own: Mapping[str, str], *, home: str, edgeplane: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of a unit: defaults, then its own ``env``, then the edgeplane
    variables (which its ``env`` cannot override). Nothing comes from the agent's environment."""
    env = {"PATH": MINIMAL_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8"}
    env.update(own)
    env.update(edgeplane)
    return env


@dataclass(frozen=True, slots=True)
class ChildSetup:
    """What :func:`child_setup` applies to one unit, as data: the agent builds it, and either
    forks the unit itself (:meth:`preexec`) or sends it to the unit spawner
    (:mod:`edge_agent.spawner`), which applies the same function in its own child."""

    procs: tuple[str, ...]
    memory_bytes: int | None
    uid: int | None
    gid: int | None
    no_new_privs: bool
    seccomp: bool  # load the units' seccomp filter (built where the fork happens)

    def to_wire(self) -> dict[str, Any]:
        return {
            "procs": list(self.procs),
            "memory_bytes": self.memory_bytes,
            "uid": self.uid,
            "gid": self.gid,
            "no_new_privs": self.no_new_privs,
            "seccomp": self.seccomp,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> ChildSetup:
        """The inverse of :meth:`to_wire` (raises KeyError or TypeError on a bad one)."""
        return cls(
            procs=tuple(data["procs"]),
            memory_bytes=data["memory_bytes"],
            uid=data["uid"],
            gid=data["gid"],
            no_new_privs=bool(data["no_new_privs"]),
            seccomp=bool(data["seccomp"]),
        )

    def preexec(self, seccomp: Callable[[], None] | None) -> Callable[[], None]:
        """The ``preexec_fn`` of a unit forked by the calling process (its parent is this one)."""
        return child_setup(
            procs=self.procs,
            memory_bytes=self.memory_bytes,
            uid=self.uid,
            gid=self.gid,
            parent_pid=os.getpid(),
            no_new_privs=self.no_new_privs,
            seccomp=seccomp if self.seccomp else None,
        )


def die_with_parent(parent_pid: int) -> bool:
    """Have the kernel SIGKILL the calling process when its parent (``parent_pid``) dies
    (``PR_SET_PDEATHSIG``); False when that parent is already gone (the caller then exits)."""
    if _libc is not None:
        zero = ctypes.c_ulong(0)
        _libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero)
    return os.getppid() == parent_pid


def child_setup(
    *,
    procs: Sequence[str],
    memory_bytes: int | None,
    uid: int | None,
    gid: int | None,
    parent_pid: int,
    no_new_privs: bool = True,
    seccomp: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """The ``preexec_fn`` of every unit: join its cgroups and set limits (best effort, as root),
    then drop to ``uid``/``gid`` (raises if that fails: the exec must not happen), then set
    PR_SET_PDEATHSIG (after the drop: a credential change clears it) and PR_SET_NO_NEW_PRIVS, and
    last loads the ``seccomp`` filter (raises if that fails): after the drop, so that the setup
    itself is never filtered, and after no_new_privs, which an unprivileged process needs to
    load one."""

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
            if not die_with_parent(parent_pid):  # the agent died before the prctl: die too
                os._exit(137)
            zero = ctypes.c_ulong(0)
            if no_new_privs and _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), zero, zero, zero):
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
        if seccomp is not None:
            seccomp()

    return apply
