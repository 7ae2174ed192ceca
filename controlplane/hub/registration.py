"""Bounds on what a node may claim when it registers: a pure check, tested with a table of cases.

Permissions on NATS stop a node from speaking for another; these bounds stop it from lying about
itself in ways that would hurt everyone (a fake node offering thousands of CPUs attracts every
placement; a heartbeat interval of an hour keeps a dead node "Ready" for three).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgeplane_contract.messages import RegisterV1

__all__ = ["RegistrationLimits", "RegistrationProblem", "registration_problem"]


@dataclass(frozen=True, slots=True)
class RegistrationLimits:
    """What a registration may declare; defaults fit any real machine.

    ``memory_within_telemetry``: the memory offered may not exceed the ``memory_total_bytes`` its
    telemetry reports (when it sends telemetry). Checked where registrations are authenticated
    (enrolment required); turn it off for nodes that deliberately over-commit.
    """

    min_heartbeat_s: float = 0.05
    max_heartbeat_s: float = 60.0
    max_cpu: float = 1024.0
    max_memory: int = 64 * 2**40  # 64 TiB
    max_gpus: int = 64
    max_gpu_memory: int = 2**40  # per GPU
    max_dpu: int = 64
    max_labels: int = 64
    memory_within_telemetry: bool = True


@dataclass(frozen=True, slots=True)
class RegistrationProblem:
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def registration_problem(
    msg: RegisterV1, limits: RegistrationLimits, *, check_telemetry: bool
) -> RegistrationProblem | None:
    """The first value of ``msg`` out of bounds, or None. ``check_telemetry`` enables the
    memory-versus-telemetry check (when ``limits`` allow it)."""
    interval = msg.heartbeat_interval_s
    if not limits.min_heartbeat_s <= interval <= limits.max_heartbeat_s:
        return RegistrationProblem(
            "heartbeat_interval_s",
            f"{interval:g} s is outside {limits.min_heartbeat_s:g}..{limits.max_heartbeat_s:g} s",
        )
    resources = msg.resources
    if not 0 < resources.cpu <= limits.max_cpu:
        return RegistrationProblem("resources.cpu", f"{resources.cpu:g} is outside (0, {limits.max_cpu:g}]")
    if not 0 < resources.memory <= limits.max_memory:
        return RegistrationProblem(
            "resources.memory", f"{resources.memory} bytes is outside (0, {limits.max_memory}]"
        )
    if len(resources.gpus) > limits.max_gpus:
        return RegistrationProblem("resources.gpus", f"{len(resources.gpus)} GPUs, at most {limits.max_gpus}")
    for i, gpu in enumerate(resources.gpus):
        if not 0 <= gpu.memory_total_bytes <= limits.max_gpu_memory:
            return RegistrationProblem(
                f"resources.gpus[{i}].memory_total_bytes",
                f"{gpu.memory_total_bytes} is outside [0, {limits.max_gpu_memory}]",
            )
    if not 0 <= resources.dpu <= limits.max_dpu:
        return RegistrationProblem("resources.dpu", f"{resources.dpu} is outside [0, {limits.max_dpu}]")
    if len(msg.labels) > limits.max_labels:
        return RegistrationProblem("labels", f"{len(msg.labels)} labels, at most {limits.max_labels}")
    telemetry = msg.telemetry
    if (
        check_telemetry
        and limits.memory_within_telemetry
        and telemetry is not None
        and telemetry.memory_total_bytes > 0
        and resources.memory > telemetry.memory_total_bytes
    ):
        return RegistrationProblem(
            "resources.memory",
            f"{resources.memory} bytes offered, but the node's telemetry reports "
            f"{telemetry.memory_total_bytes} in total",
        )
    return None
