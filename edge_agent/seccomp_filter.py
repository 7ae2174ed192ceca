"""The seccomp filter every unit runs under: allow by default, refuse what user code never needs.

Built once by :func:`detect` through libseccomp (the ``pyseccomp`` ctypes binding, whose API is
libseccomp's own Python bindings'), loaded by each unit's child as the last step before its exec
(:func:`edge_agent.child_process.child_setup`). Refused with ``EPERM``: new namespaces
(``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag), mounting and changing root,
tracing and reading other processes' memory, kernel modules and ``kexec``, BPF and perf events,
the kernel keyring, ``userfaultfd``, ``open_by_handle_at``, ``reboot``, swap and process
accounting. ``clone3`` answers ``ENOSYS``: its flags are in memory, where a filter cannot look,
so libc falls back to ``clone``, whose flags it can (as Docker's default profile does).

Where libseccomp, the binding or the kernel's seccomp is missing, units run without a filter and
the agent reports ``seccomp: "none (<why>)"`` in its isolation field.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["CLONE_NAMESPACE_FLAGS", "DENIED_SYSCALLS", "UnitFilter", "detect"]

# Syscalls refused with EPERM in every unit: none is needed by a workload or a function.
DENIED_SYSCALLS: tuple[str, ...] = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    # The new mount API does what mount(2) does.
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "open_by_handle_at",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
)

# clone(2)'s namespace flags (its first argument); threads and forks set none of them.
# CLONE_NEWTIME (0x80) is left out: in clone(2) those bits are the exit signal, and clone(2)
# cannot make a time namespace anyway (only unshare and clone3, both refused).
CLONE_NAMESPACE_FLAGS: dict[str, int] = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

_PROBE_TIMEOUT_S = 5.0
_NR_SCMP_ERROR = -1  # libseccomp's answer for a syscall name it does not know


@dataclass(slots=True)
class UnitFilter:
    """A filter built in the agent; :meth:`load` installs it in the calling (child) process."""

    context: Any  # a pyseccomp.SyscallFilter; kept here so that its libseccomp context lives on

    def load(self) -> None:
        """Install the filter in this process (raises OSError); for a child before its exec."""
        self.context.load()


def build_filter() -> UnitFilter:
    """The filter (raises ImportError, RuntimeError or OSError where it cannot be built); the
    unit spawner (:mod:`edge_agent.spawner_process`) builds its own copy with it."""
    import pyseccomp as seccomp  # RuntimeError when libseccomp itself is missing

    context = seccomp.SyscallFilter(seccomp.ALLOW)
    native = seccomp.system_arch()
    # 32-bit system calls get the same rules rather than a kill (libseccomp's default for an
    # architecture not in the filter), so that 32-bit programs keep working on x86-64.
    if native == seccomp.Arch.X86_64:
        for arch in (seccomp.Arch.X86, seccomp.Arch.X32):
            try:
                context.add_arch(arch)
            except OSError:
                pass
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        if number == _NR_SCMP_ERROR:
            continue  # newer than this libseccomp: no program here can call it by that name
        context.add_rule(eperm, number)
    for flag in CLONE_NAMESPACE_FLAGS.values():
        context.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    context.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return UnitFilter(context)


def _probe(unit_filter: UnitFilter) -> str | None:
    """Load the filter in a forked child and check that it refuses a user namespace; None if it
    does, else why not. The child does nothing but that and ``_exit``s."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            unit_filter.load()
            failed = libc.unshare(CLONE_NAMESPACE_FLAGS["CLONE_NEWUSER"]) != 0
            code = 0 if failed and ctypes.get_errno() == errno.EPERM else 4
        finally:
            os._exit(code)
    deadline = time.monotonic() + _PROBE_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "the probe did not finish"
        time.sleep(0.005)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return None
    if code == 3:
        return "the kernel refused to load the filter"
    return f"the filter did not refuse unshare(CLONE_NEWUSER) (probe exit {code})"


def detect() -> tuple[UnitFilter | None, str]:
    """The units' filter and what to report: ``(filter, "yes")``, or ``(None, "none (<why>)")``."""
    if not sys.platform.startswith("linux"):
        return None, "none (not Linux)"
    try:
        unit_filter = build_filter()
    except ImportError:
        return None, "none (pyseccomp not installed)"
    except RuntimeError:  # pyseccomp raises it at import when libseccomp.so is missing
        return None, "none (libseccomp not found)"
    except OSError as exc:
        return None, f"none (libseccomp could not build the filter: {exc.strerror or exc})"
    why = _probe(unit_filter)
    if why is not None:
        return None, f"none ({why})"
    return unit_filter, "yes"
