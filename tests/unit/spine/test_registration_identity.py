"""What an enrolled node's identity admits of its registration: a table of cases, no servers."""

from __future__ import annotations

import pytest

from edgeplane_contract.messages import GpuTelemetry, NodeResources, RegisterV1, Telemetry

from controlplane.hub.registration import (
    Capacity,
    RegistrationLimits,
    Rule,
    identity_problem,
    registration_problem,
)

GiB = 2**30
GPU = GpuTelemetry(index=0, name="A100")
FIRST = Capacity(cpu=4.0, memory=8 * GiB, gpus=1, dpu=0)


def _msg(
    *,
    cpu: float = 4.0,
    memory: int = 8 * GiB,
    gpus: int = 1,
    shown_gpus: int = 1,
    total: int | None = 16 * GiB,
) -> RegisterV1:
    telemetry = None
    if total is not None:
        telemetry = Telemetry(
            cpu_percent=1.0, memory_used_bytes=GiB, memory_total_bytes=total, gpus=[GPU] * shown_gpus
        )
    return RegisterV1(
        node="n1",
        cluster="default",
        boot_id="b",
        agent_version="t",
        resources=NodeResources(cpu=cpu, memory=memory, gpus=[GPU] * gpus),
        heartbeat_interval_s=1.0,
        telemetry=telemetry,
    )


@pytest.mark.parametrize(
    ("msg", "enrolled", "limits", "expected"),
    [
        (_msg(), None, RegistrationLimits(), None),
        (_msg(), FIRST, RegistrationLimits(), None),
        (_msg(cpu=2.0, memory=GiB, gpus=0), FIRST, RegistrationLimits(), None),
        (_msg(total=None), None, RegistrationLimits(), ("telemetry", Rule.NO_TELEMETRY)),
        # The opt-out flag covers over-commit, not a registration without telemetry.
        (
            _msg(total=None),
            None,
            RegistrationLimits(memory_within_telemetry=False),
            ("telemetry", Rule.NO_TELEMETRY),
        ),
        (_msg(memory=100 * GiB), None, RegistrationLimits(), ("resources.memory", Rule.ABOVE_TELEMETRY)),
        (_msg(memory=100 * GiB), None, RegistrationLimits(memory_within_telemetry=False), None),
        (_msg(total=0), None, RegistrationLimits(), ("resources.memory", Rule.ABOVE_TELEMETRY)),
        (_msg(gpus=2), None, RegistrationLimits(), ("resources.gpus", Rule.ABOVE_TELEMETRY)),
        (_msg(cpu=8.0), FIRST, RegistrationLimits(), ("resources.cpu", Rule.ABOVE_ENROLLED)),
        (_msg(memory=9 * GiB), FIRST, RegistrationLimits(), ("resources.memory", Rule.ABOVE_ENROLLED)),
        (_msg(gpus=2, shown_gpus=2), FIRST, RegistrationLimits(), ("resources.gpus", Rule.ABOVE_ENROLLED)),
        # Over-commit allowed against telemetry, but never beyond its first claim.
        (
            _msg(memory=32 * GiB),
            Capacity(cpu=4.0, memory=32 * GiB, gpus=1, dpu=0),
            RegistrationLimits(memory_within_telemetry=False),
            None,
        ),
    ],
)
def test_identity_rules_name_the_field_and_the_rule(
    msg: RegisterV1, enrolled: Capacity | None, limits: RegistrationLimits, expected: tuple[str, str] | None
) -> None:
    problem = identity_problem(msg, limits, enrolled=enrolled)
    if expected is None:
        assert problem is None
        return
    assert problem is not None and (problem.field, problem.rule) == expected
    assert str(problem).startswith(expected[0]) and f"(rule {expected[1]})" in str(problem)


def test_bounds_problems_read_as_before_without_a_rule() -> None:
    problem = registration_problem(_msg(cpu=4096.0), RegistrationLimits())
    assert problem is not None and problem.rule == Rule.BOUNDS
    assert str(problem) == "resources.cpu: 4096 is outside (0, 1024]"


def test_a_capacity_round_trips_through_its_stored_form() -> None:
    claimed = Capacity.claimed(_msg().resources)
    assert claimed == FIRST and Capacity.of(claimed.as_dict()) == claimed
    assert Capacity.of({}) == Capacity(cpu=0.0, memory=0, gpus=0, dpu=0)
