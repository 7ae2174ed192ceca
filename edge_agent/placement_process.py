"""How one placement's process starts: its sandbox (work dir, gid, cgroups), its environment, its
limits (memory, CPU quota, pids) and the exec, its output appended to its log."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeplane_contract.messages import PlacementState, RunSpec

from edge_agent.cgroups import CpuLimiter
from edge_agent.confinement import Confinement, Sandbox
from edge_agent.spawn import ProcessHandle

__all__ = ["RunningPlacement", "start_process"]

log = logging.getLogger("edgeplane.agent.executor")


@dataclass(slots=True)
class RunningPlacement:
    """One placement on this agent: its reported state, its spec and its current process.

    ``cpu``/``memory`` are the quotas of the current process: the request at first, then what the
    local policy chose at the last restart. ``wake`` cuts a restart back-off short (a stop).
    """

    state: PlacementState
    spec: RunSpec
    process: ProcessHandle | None = None
    task: asyncio.Task[None] | None = None
    stop_requested: bool = False
    limits: list[str] = field(default_factory=list)
    cpu: float = 0.0
    memory: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sandbox: Sandbox | None = None  # its work dir and cgroups, kept across restarts
    # Set (the Failed message) when the work dir grew over the spec's ephemeral_storage.
    storage_exceeded: str = ""


async def start_process(
    entry: RunningPlacement,
    *,
    confinement: Confinement,
    cpu_limiter: CpuLimiter,
    log_path: Path,
    exit_record: Mapping[str, Any] | None = None,
) -> tuple[int, str] | None:
    """Start the placement's process with its current quotas; (exit code, message) if exec failed.
    ``exit_record``: what the unit spawner writes when the process ends (:mod:`edge_agent.exit_records`)."""
    spec, state = entry.spec, entry.state
    if entry.sandbox is None:
        try:
            entry.sandbox = confinement.open(state.placement_id)
        except OSError as exc:
            return 126, f"could not prepare the work dir and cgroups: {exc.strerror or exc}"
    sandbox = entry.sandbox
    edgeplane = {
        "EDGEPLANE_PLACEMENT_ID": state.placement_id,
        "EDGEPLANE_WORKLOAD_ID": state.workload_id,
        "EDGEPLANE_RESTARTS": str(state.restarts),
    }
    if spec.gpu_indices:
        edgeplane["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices)
    env = confinement.env(sandbox, spec.env, edgeplane)
    entry.limits = ["memory:rlimit_as"]
    if confinement.groups.pids_max is not None:
        entry.limits.append(f"pids:{confinement.groups.pids_max}")
    procs: Path | None = None
    try:
        procs = cpu_limiter.prepare(state.placement_id, entry.cpu)
    except OSError as exc:  # a cgroup that cannot be made: run unlimited, and say so
        log.warning("no CPU quota for %s: %s", state.placement_id, exc)
    if procs is not None:
        entry.limits.append(f"cpu:{cpu_limiter.name}")
    try:
        # A restart appends to the log, so the output of every run is kept. Always O_APPEND: when
        # the agent trims the file (edge_agent/logs.py), the process writes at the new end.
        with log_path.open("ab") as log_file:
            if not state.restarts:
                log_file.truncate(0)
            # Forked by the unit spawner, else by the agent off its loop (Confinement.launch).
            entry.process = await confinement.launch(
                spec.command,
                sandbox=sandbox,
                stdout=log_file,
                env=env,
                memory_bytes=entry.memory,
                extra_procs=[procs] if procs else [],
                exit_record=exit_record,
            )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        entry.process = None
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return code, f"could not start {spec.command[0]!r}: {reason}"
    return None
