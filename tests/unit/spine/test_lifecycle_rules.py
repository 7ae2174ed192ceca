"""The workload lifecycle's rules, as tables: (state, report) -> effect; placements -> status."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controlplane.hub.lifecycle import (
    MAX_ATTEMPTS,
    ReportEffect,
    WorkloadVerdict,
    late_success_blocked_by,
    missing_replicas,
    report_effect,
    workload_verdict,
)


@dataclass
class P:
    replica: int
    status: str
    attempt: int = 1
    acked: bool = False
    message: str = ""
    exit_code: int | None = None


E = ReportEffect


@pytest.mark.parametrize(
    ("current", "reported", "effect"),
    [
        ("Scheduled", "Running", E.START),
        ("Running", "Running", E.RESTARTS),  # a local restart, or a replay
        ("Scheduled", "Succeeded", E.END),  # finished before its Running report arrived
        ("Running", "Succeeded", E.END),
        ("Running", "Failed", E.END),
        ("Running", "Cancelled", E.END),
        ("Lost", "Succeeded", E.LATE_SUCCESS),  # its node was only silent
        ("Lost", "Failed", E.IGNORE),  # the replica is placed again anyway
        ("Lost", "Running", E.IGNORE),
        ("Succeeded", "Running", E.IGNORE),  # never backwards
        ("Succeeded", "Failed", E.IGNORE),
        ("Failed", "Succeeded", E.IGNORE),
        ("Cancelled", "Running", E.IGNORE),
        ("Running", "Pending", E.IGNORE),  # not a state an agent reports
    ],
)
def test_a_report_moves_a_placement_only_forward(current, reported, effect):
    assert report_effect(current, reported) is effect


@pytest.mark.parametrize(
    ("later", "blocks"),
    [
        (P(0, "Scheduled", attempt=2), False),  # not yet sent: it is cancelled instead
        (P(0, "Scheduled", attempt=2, acked=True), True),  # the agent took it: it may run
        (P(0, "Running", attempt=2), True),
        (P(0, "Succeeded", attempt=2), True),
        (P(0, "Failed", attempt=2), True),
        (P(0, "Lost", attempt=2), False),  # never heard to start
        (P(0, "Running", attempt=1), False),  # an earlier attempt does not count
        (P(1, "Running", attempt=2), False),  # another replica does not count
    ],
)
def test_a_late_success_wins_unless_a_later_attempt_may_have_started(later, blocks):
    late = P(0, "Lost", attempt=1)
    assert bool(late_success_blocked_by(late, [later])) is blocks


@pytest.mark.parametrize(
    ("replicas", "placements", "missing"),
    [
        (2, [], [0, 1]),
        (2, [P(0, "Running"), P(1, "Scheduled")], []),
        (2, [P(0, "Lost"), P(1, "Succeeded")], [0]),
        (1, [P(0, "Lost", attempt=1), P(0, "Scheduled", attempt=2)], []),
        (1, [P(0, "Scheduled", attempt=2), P(0, "Lost", attempt=1)], []),  # latest by attempt
        (1, [P(0, "Succeeded", attempt=1), P(0, "Cancelled", attempt=2)], []),  # done once is done
        (1, [P(0, "Cancelled")], [0]),
        (1, [P(0, "Failed")], [0]),
    ],
)
def test_missing_replicas_are_those_not_done_and_not_live(replicas, placements, missing):
    assert missing_replicas(replicas, placements) == missing


V = WorkloadVerdict
LOST_EVERY_TIME = [P(0, "Lost", attempt=a) for a in range(1, MAX_ATTEMPTS + 1)]


@pytest.mark.parametrize(
    ("replicas", "cancel", "placements", "verdict"),
    [
        (1, False, [], V("Pending")),
        (1, False, [P(0, "Scheduled")], V("Scheduled")),
        (2, False, [P(0, "Running"), P(1, "Scheduled")], V("Running")),
        (2, False, [P(0, "Succeeded"), P(1, "Succeeded")], V("Succeeded")),
        (2, False, [P(0, "Succeeded"), P(1, "Lost")], V("Pending")),
        (1, False, [P(0, "Succeeded", attempt=1), P(0, "Lost", attempt=2)], V("Succeeded")),
        (1, False, [P(0, "Failed", exit_code=3)], V("Failed", "replica 0 failed: exit code 3")),
        (1, False, [P(0, "Failed", message="oom")], V("Failed", "replica 0 failed: oom")),
        (
            2,
            False,
            [P(0, "Failed", exit_code=1), P(1, "Running")],
            V("Running", stop_active="a sibling replica failed"),
        ),
        (1, True, [P(0, "Running")], V("Cancelling")),
        (1, True, [P(0, "Cancelled")], V("Cancelled")),
        (1, True, [P(0, "Failed")], V("Cancelled")),  # a cancel outranks a failure
        (1, False, LOST_EVERY_TIME, V("Failed", f"gave up after {MAX_ATTEMPTS} attempts")),
        (1, False, LOST_EVERY_TIME[:-1], V("Pending")),
        (1, False, [P(0, "Cancelled")], V("Pending")),  # stopped by a preemption: placed again
    ],
)
def test_a_workloads_status_follows_from_its_placements(replicas, cancel, placements, verdict):
    assert workload_verdict(replicas, cancel, placements) == verdict
