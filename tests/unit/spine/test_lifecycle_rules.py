"""The workload lifecycle's rules, as tables: (state, report) -> effect; placements -> status."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controlplane.hub.lifecycle import (
    MAX_ATTEMPTS,
    ReportEffect,
    WorkloadVerdict,
    carried_restarts,
    late_success_blocked_by,
    missing_replicas,
    report_effect,
    rerun_after_shutdown,
    rerun_by_shutdown,
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
    restarts: int = 0


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


# A placement its agent stopped while shutting down, as the hub ends it (``hub.workloads``).
SHUT_DOWN_FAILED = P(0, "Failed", exit_code=143, message="node n1 shut down while it ran (agent stopped)")
SHUT_DOWN_RERUN = P(0, "Lost", exit_code=143, message="node n1 shut down while it ran (agent stopped); ...")


@pytest.mark.parametrize(
    ("policy", "restarts", "limit", "rerun"),
    [
        ("never", 0, 5, False),
        ("on-failure", 0, 5, True),  # a process the shutdown killed did not succeed
        ("always", 4, 5, True),
        ("always", 5, 5, False),  # max_restarts counts these too
        ("on-failure", 0, 0, False),
        ("sometimes", 0, 5, False),  # an unknown policy is never
    ],
)
def test_a_node_shutdown_follows_the_restart_policy(policy, restarts, limit, rerun):
    assert rerun_after_shutdown(policy, restarts, limit) is rerun


@pytest.mark.parametrize(
    ("previous", "carried"),
    [
        (None, 0),  # a first attempt
        (SHUT_DOWN_RERUN, 1),
        (P(0, "Lost", exit_code=143, restarts=2), 3),  # its own restarts, and this one
        (P(0, "Lost", restarts=2), 0),  # a node loss is no restart: the count starts afresh
        (P(0, "Cancelled", restarts=2), 0),  # preempted
    ],
)
def test_an_attempt_after_a_node_shutdown_carries_the_restarts(previous, carried):
    assert carried_restarts(previous) == carried


def test_only_a_lost_placement_with_an_exit_code_was_ended_by_its_nodes_shutdown():
    assert rerun_by_shutdown(SHUT_DOWN_RERUN)
    assert not rerun_by_shutdown(P(0, "Lost"))  # lease expiry, or the agent refused the run
    assert not rerun_by_shutdown(SHUT_DOWN_FAILED)


@pytest.mark.parametrize(
    ("cancel", "placements", "verdict"),
    [
        (False, [SHUT_DOWN_FAILED], V("Failed", f"replica 0 failed: {SHUT_DOWN_FAILED.message}")),
        (False, [SHUT_DOWN_RERUN], V("Pending")),  # placed again
        (False, [SHUT_DOWN_RERUN, P(0, "Running", attempt=2, restarts=1)], V("Running")),
        (True, [SHUT_DOWN_FAILED], V("Cancelled")),  # a user's cancel still ends Cancelled
    ],
)
def test_a_workload_whose_node_shut_down_fails_or_waits_for_its_next_attempt(cancel, placements, verdict):
    assert workload_verdict(1, cancel, placements) == verdict
    if verdict.status == "Pending":
        assert missing_replicas(1, placements) == [0]
