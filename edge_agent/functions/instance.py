"""One function instance: its record (:class:`Instance`), how its worker process starts (command
line, environment, sandbox, exec) and how an invocation's result is put together."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeplane_contract.messages import FunctionCode, InvokeResultV1, InvokeV1

from edge_agent.confinement import Confinement, Sandbox
from edge_agent.spawn import PipedProcess

__all__ = [
    "InitError",
    "Instance",
    "invoke_result",
    "log_tail",
    "not_started_error",
    "start_worker",
    "timeout_error",
    "worker_argv",
]


@dataclass(eq=False)
class Instance:
    """One worker process of a function version: ``state`` starting, idle, busy or stopped;
    ``pending`` the invocations it serves now, by id."""

    instance_id: str
    code: FunctionCode
    process: PipedProcess
    spawned_at: float
    keep_alive_s: float
    ready: asyncio.Future[float]
    state: str = "starting"
    in_flight: int = 0
    last_used_at: float = 0.0
    cold_start_ms: float = 0.0
    pending: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    stderr_path: Path | None = None
    sandbox: Sandbox | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.code.name, self.code.version)

    def has_room(self) -> bool:
        return self.state in ("idle", "busy") and self.in_flight < self.code.max_concurrency


class InitError(Exception):
    """An instance that could not start or initialise; ``error`` is the error to report;
    ``stopped``: the agent stopped it while it started (a timeout, an eviction), not its fault."""

    def __init__(self, error: dict[str, Any], *, stopped: bool = False) -> None:
        super().__init__(error.get("message", "initialisation failed"))
        self.error = dict(error)
        self.stopped = stopped


def timeout_error(code: FunctionCode) -> dict[str, Any]:
    """The error of an invocation past the function's timeout."""
    return {"type": "Timeout", "message": f"timed out after {code.timeout_s:g}s", "code": "timeout"}


def not_started_error(why: str) -> dict[str, Any]:
    """The error of an invocation never handed to a worker: it ran nowhere, so it may be retried
    (the hub sends it to another instance within its budget)."""
    return {"type": "NotStarted", "message": f"not started: {why}", "code": "not_started"}


def log_tail(path: Path | None, limit: int = 600) -> str:
    """The end of an instance's stderr log (why it exited), "" when there is none."""
    if path is None:
        return ""
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode(errors="replace").strip()


def worker_argv(code: FunctionCode, sandbox: Sandbox, confinement: Confinement) -> list[str]:
    """The command line of an instance: the function's own command, or the Python worker."""
    if code.runtime == "command":
        return list(code.command)
    assert confinement.python is not None  # else unavailable() said so
    argv = [
        confinement.python.executable,
        str(confinement.worker_script()),
        "--concurrency",
        str(code.max_concurrency),
    ]
    if code.source:
        source = confinement.code_dir(f"{code.name}-v{code.version}", sandbox) / "handler.py"
        confinement.write_code(source, code.source, sandbox)
        argv += ["--source", str(source), "--handler", code.handler]
    else:
        argv += ["--handler", code.handler]
        if code.path:
            argv += ["--path", code.path]
    return argv


async def start_worker(
    code: FunctionCode, instance_id: str, *, confinement: Confinement, stderr_path: Path
) -> tuple[PipedProcess, Sandbox]:
    """Open the instance's sandbox and exec its worker (stderr to ``stderr_path``); raises
    :class:`InitError` for a command that cannot start (the function's fault)."""
    # One private group per version: its instances may share the version's read-only source.
    sandbox = confinement.open(f"fn-{instance_id}", group_key=f"fn:{code.name}:v{code.version}")
    edgeplane = {"EDGEPLANE_FUNCTION": code.name, "EDGEPLANE_VERSION": str(code.version)}
    if code.runtime != "command":
        worker = confinement.worker_env()
        if "PYTHONPATH" in worker and code.env.get("PYTHONPATH"):
            worker["PYTHONPATH"] += os.pathsep + code.env["PYTHONPATH"]
        edgeplane.update(worker)
    try:
        with stderr_path.open("ab") as stderr:  # O_APPEND: the agent may trim it (edge_agent/logs.py)
            # Forked by the unit spawner, else by the agent (Confinement.launch_piped).
            process = await confinement.launch_piped(
                worker_argv(code, sandbox, confinement),
                sandbox=sandbox,
                stderr=stderr,
                env=confinement.env(sandbox, code.env, edgeplane),
                limit=16 * 2**20,
            )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        confinement.close(sandbox)
        if code.runtime != "command":
            raise
        # A command naming a missing or non-executable program: the function's fault.
        why = exc.strerror or str(exc)
        error = {"type": type(exc).__name__, "message": f"cannot start {code.command[0]!r}: {why}"}
        raise InitError(error) from None
    except BaseException:
        confinement.close(sandbox)
        raise
    return process, sandbox


def invoke_result(
    request: InvokeV1,
    begin: float,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    cold: bool = False,
    cold_ms: float = 0.0,
    queued_ms: float | None = None,
    exec_ms: float = 0.0,
    instance: Instance | None = None,
) -> InvokeResultV1:
    """The result of an invocation begun at ``begin`` (perf_counter), its times in ms."""
    elapsed = (time.perf_counter() - begin) * 1000
    return InvokeResultV1(
        invocation_id=request.invocation_id,
        ok=error is None,
        result=result,
        error=error,
        cold_start=cold,
        cold_start_ms=cold_ms,
        queue_ms=max(0.0, (queued_ms if queued_ms is not None else elapsed) - cold_ms),
        exec_ms=exec_ms,
        instance_id=instance.instance_id if instance else "",
    )
