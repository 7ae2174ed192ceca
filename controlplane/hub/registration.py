"""Bounds on what a node may claim when it registers: pure checks, tested with a table of cases.

Permissions on NATS stop a node from speaking for another; these bounds stop it from lying about
itself in ways that would hurt everyone (a fake node offering thousands of CPUs attracts every
placement; a heartbeat interval of an hour keeps a dead node "Ready" for three).

Where registrations are authenticated (enrolment required), the node's identity bounds its claim
too, as Kubernetes' NodeRestriction admission bounds what a kubelet may write
(:func:`identity_problem`): its registration carries telemetry; it offers no more memory or GPUs
than its telemetry shows; and no more CPU, memory, GPUs or DPUs than at its first registration
with its key (:class:`Capacity`, kept with its credentials) until an admin approves it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from edgeplane_contract.messages import NodeResources, RegisterV1

__all__ = [
    "Capacity",
    "RegistrationLimits",
    "RegistrationProblem",
    "Rule",
    "identity_problem",
    "registration_problem",
]


class Rule:
    """Which rule refused a registration (``RegistrationProblem.rule``)."""

    BOUNDS = "bounds"  # a value no real machine has
    NO_TELEMETRY = "no_telemetry"  # an enrolled node's registration without telemetry
    ABOVE_TELEMETRY = "above_telemetry"  # more memory or GPUs than its own telemetry shows
    ABOVE_ENROLLED = "above_enrolled_capacity"  # more than at its first registration with its key


@dataclass(frozen=True, slots=True)
class RegistrationLimits:
    """What a registration may declare; defaults fit any real machine.

    ``memory_within_telemetry``: the memory (and the GPUs) offered may not exceed what its
    telemetry reports (``memory_total_bytes``, its ``gpus``). Checked where registrations are
    authenticated (enrolment required); turn it off for nodes that deliberately over-commit.
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
    rule: str = Rule.BOUNDS

    def __str__(self) -> str:
        if self.rule == Rule.BOUNDS:
            return f"{self.field}: {self.reason}"
        return f"{self.field}: {self.reason} (rule {self.rule})"


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a node claims, as far as its identity bounds it (not ``ephemeral_storage``: free disk
    space, which changes between registrations by itself)."""

    cpu: float
    memory: int
    gpus: int
    dpu: int

    @classmethod
    def claimed(cls, resources: NodeResources) -> Capacity:
        return cls(cpu=resources.cpu, memory=resources.memory, gpus=len(resources.gpus), dpu=resources.dpu)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Capacity:
        """From its stored form (:meth:`as_dict`); a missing key counts as 0 (nothing admitted)."""
        return cls(
            cpu=float(data.get("cpu", 0.0)),
            memory=int(data.get("memory", 0)),
            gpus=int(data.get("gpus", 0)),
            dpu=int(data.get("dpu", 0)),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def registration_problem(msg: RegisterV1, limits: RegistrationLimits) -> RegistrationProblem | None:
    """The first value of ``msg`` out of bounds, or None."""
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
    return None


def identity_problem(
    msg: RegisterV1, limits: RegistrationLimits, *, enrolled: Capacity | None
) -> RegistrationProblem | None:
    """What an enrolled node may not claim (None: admitted). ``enrolled``: the capacity recorded
    at its first registration with its key (None: this is that registration)."""
    telemetry = msg.telemetry
    if telemetry is None:
        return RegistrationProblem(
            "telemetry",
            "missing: an enrolled node's registration carries its telemetry, which bounds its claim",
            Rule.NO_TELEMETRY,
        )
    resources = msg.resources
    if limits.memory_within_telemetry:
        if resources.memory > telemetry.memory_total_bytes:
            return RegistrationProblem(
                "resources.memory",
                f"{resources.memory} bytes offered, but the node's telemetry reports "
                f"{telemetry.memory_total_bytes} in total",
                Rule.ABOVE_TELEMETRY,
            )
        if len(resources.gpus) > len(telemetry.gpus):
            return RegistrationProblem(
                "resources.gpus",
                f"{len(resources.gpus)} GPUs offered, but the node's telemetry shows {len(telemetry.gpus)}",
                Rule.ABOVE_TELEMETRY,
            )
    if enrolled is None:
        return None
    claimed = Capacity.claimed(resources)
    for name, value, bound in (
        ("cpu", claimed.cpu, enrolled.cpu),
        ("memory", claimed.memory, enrolled.memory),
        ("gpus", claimed.gpus, enrolled.gpus),
        ("dpu", claimed.dpu, enrolled.dpu),
    ):
        if value > bound:
            return RegistrationProblem(
                f"resources.{name}",
                f"{_show(value)} claimed, more than the {_show(bound)} of its first registration with "
                "its key; "
                f"an admin approves more with 'controlplane node approve-capacity {msg.node}'",
                Rule.ABOVE_ENROLLED,
            )
    return None


def _show(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
