"""Runs placed workloads as local processes and reports their state changes.

Each placement is one subprocess in its own session (so a stop reaches its whole process group),
with its output in ``<work_dir>/logs/<placement>.log``. Limits applied where the OS allows:
memory through ``RLIMIT_AS``; the process dies with the agent (``PR_SET_PDEATHSIG``) so a killed
agent leaves no orphans. CPU quotas need a delegated cgroup v2 and are not enforced otherwise
(the state message says which limits were applied).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.bus.messages import PlacementState, RunSpec

__all__ = ["ProcessRunner", "RunningPlacement"]

log = logging.getLogger("edgeplane.agent.executor")

TERMINAL = ("Succeeded", "Failed", "Cancelled")


@dataclass(slots=True)
class RunningPlacement:
    state: PlacementState
    spec: RunSpec
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    stop_requested: bool = False
    limits: list[str] = field(default_factory=list)


try:
    import resource as _resource
except ImportError:  # pragma: no cover - not on POSIX
    _resource = None  # type: ignore[assignment]

_libc: Any = None
if sys.platform.startswith("linux"):
    try:
        import ctypes

        _libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover
        _libc = None

_PR_SET_PDEATHSIG = 1


def _limits_preexec(memory_bytes: int | None) -> Callable[[], None]:
    """Runs in the child between fork and exec: no imports, no allocation-heavy work, no raising."""

    def apply() -> None:
        if _resource is not None and memory_bytes is not None:
            try:
                _resource.setrlimit(_resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            except Exception:
                pass
        if _libc is not None:
            try:
                _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            except Exception:
                pass

    return apply


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode(errors="replace").strip()
    except OSError:
        return ""


class ProcessRunner:
    """Starts, watches and stops placement processes; calls ``on_change`` on every state change."""

    def __init__(
        self,
        *,
        work_dir: Path,
        on_change: Callable[[PlacementState], None],
        stop_grace_s: float = 5.0,
        retain_finished: int = 1000,
    ) -> None:
        self.work_dir = work_dir
        self.logs = work_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.on_change = on_change
        self.stop_grace_s = stop_grace_s
        self.retain_finished = retain_finished
        self.placements: dict[str, RunningPlacement] = {}
        self.tombstones: set[str] = set()  # stopped before they ran: a late run command is refused

    def running_ids(self) -> list[str]:
        return [pid for pid, p in self.placements.items() if p.state.state == "Running"]

    def states(self) -> list[PlacementState]:
        return [p.state for p in self.placements.values()]

    def knows(self, placement_id: str) -> bool:
        return placement_id in self.placements

    async def start(self, placement_id: str, workload_id: str, spec: RunSpec) -> None:
        """Start a placement; an exec failure becomes a Failed state, never an exception."""
        state = PlacementState(placement_id=placement_id, workload_id=workload_id, state="Running")
        entry = RunningPlacement(state=state, spec=spec)
        self.placements[placement_id] = entry
        log_path = self.logs / f"{placement_id}.log"
        env = {
            **os.environ,
            **spec.env,
            "EDGEPLANE_PLACEMENT_ID": placement_id,
            "EDGEPLANE_WORKLOAD_ID": workload_id,
        }
        if spec.gpu_indices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices)
        entry.limits = ["memory:rlimit_as"]
        try:
            with log_path.open("wb") as log_file:
                entry.process = await asyncio.create_subprocess_exec(
                    *spec.command,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=asyncio.subprocess.STDOUT,
                    cwd=str(self.work_dir),
                    env=env,
                    start_new_session=True,
                    preexec_fn=_limits_preexec(spec.memory),
                )
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            now = time.time()
            state.state, state.exit_code = "Failed", 127 if isinstance(exc, FileNotFoundError) else 126
            state.started_at, state.finished_at = now, now
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            state.message = f"could not start {spec.command[0]!r}: {reason}"
            self.on_change(state)
            self._trim()
            return
        state.started_at = time.time()
        self.on_change(state)
        entry.task = asyncio.create_task(self._watch(entry, log_path), name=f"watch-{placement_id}")

    async def _watch(self, entry: RunningPlacement, log_path: Path) -> None:
        process = entry.process
        assert process is not None
        timed_out = False
        try:
            if entry.spec.timeout_s:
                await asyncio.wait_for(process.wait(), timeout=entry.spec.timeout_s)
            else:
                await process.wait()
        except TimeoutError:
            timed_out = True
            await self._kill(process)
        code = process.returncode if process.returncode is not None else -signal.SIGKILL
        state = entry.state
        state.exit_code = 128 - code if code < 0 else code
        state.finished_at = time.time()
        if entry.stop_requested:
            state.state, state.message = "Cancelled", "stopped on request"
        elif timed_out:
            state.state, state.message = "Failed", f"timed out after {entry.spec.timeout_s:g}s"
        elif code == 0:
            state.state, state.message = "Succeeded", ""
        else:
            tail = _tail(log_path)
            state.state = "Failed"
            state.message = f"exit code {state.exit_code}" + (
                f": {tail.splitlines()[-1][:300]}" if tail else ""
            )
        self.on_change(state)
        self._trim()

    async def _kill(self, process: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=self.stop_grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def stop(self, placement_id: str) -> bool:
        """Stop a placement; False when this agent never had it (it is tombstoned instead)."""
        entry = self.placements.get(placement_id)
        if entry is None:
            self.tombstones.add(placement_id)
            return False
        if entry.state.state in TERMINAL or entry.process is None:
            return True
        entry.stop_requested = True
        await self._kill(entry.process)
        if entry.task is not None:
            await asyncio.shield(entry.task)
        return True

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(pid) for pid in self.running_ids()), return_exceptions=True)

    def _trim(self) -> None:
        finished = [pid for pid, p in self.placements.items() if p.state.state in TERMINAL]
        for pid in finished[: max(0, len(finished) - self.retain_finished)]:
            del self.placements[pid]
