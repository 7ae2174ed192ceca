"""The workload lifecycle as pure rules: (state, report) -> what changes. No store, no clock, no bus.

A workload runs as replicas; each attempt of a replica on one node is a *placement*. The hub applies
these rules to its rows (``hub.service``); ``tests/unit/spine/test_lifecycle_rules.py`` tables them.

Placement: Scheduled -> Running -> Succeeded | Failed | Cancelled, or Lost when its node is presumed
dead. Workload: Pending -> Scheduled -> Running -> Succeeded | Failed, or Cancelling -> Cancelled.

A placement whose agent stopped it while shutting down (reason ``NodeShutdown``) follows the
workload's restart policy: ``never`` ends it Failed (so the workload fails); ``on-failure`` and
``always`` end it Lost, with the exit code the agent reported (a node presumed dead reports none),
and the replica's next attempt inherits its restarts plus one (:func:`carried_restarts`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = [
    "ACTIVE",
    "ENDINGS",
    "MAX_ATTEMPTS",
    "TERMINAL",
    "PlacementFacts",
    "ReportEffect",
    "WorkloadVerdict",
    "carried_restarts",
    "late_success_blocked_by",
    "missing_replicas",
    "report_effect",
    "rerun_after_shutdown",
    "rerun_by_shutdown",
    "workload_verdict",
]

ACTIVE = ("Scheduled", "Running")
TERMINAL = ("Succeeded", "Failed", "Cancelled", "Lost")
ENDINGS = ("Succeeded", "Failed", "Cancelled")  # what an agent may report as a placement's end
MAX_ATTEMPTS = 5  # a replica Lost this many times fails the workload


class PlacementFacts(Protocol):
    """What the rules read of a placement (the store's PlacementRow is one)."""

    @property
    def replica(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def acked(self) -> bool: ...
    @property
    def message(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def restarts(self) -> int: ...


P = TypeVar("P", bound=PlacementFacts)


class ReportEffect(enum.Enum):
    """What an agent's report of a placement's state does to it."""

    IGNORE = "ignore"  # a replay, or news of a placement that has already ended
    START = "start"  # Scheduled -> Running
    RESTARTS = "restarts"  # still Running: only the local restart count may move
    END = "end"  # Succeeded, Failed or Cancelled
    LATE_SUCCESS = "late_success"  # Succeeded after the placement was presumed Lost


def report_effect(current: str, reported: str) -> ReportEffect:
    """Placements only move forward, so replays and reordered reports are no-ops; a Succeeded from
    a node that was only silent (its placement marked Lost) is heard (``late_success_blocked_by``)."""
    if current == "Lost" and reported == "Succeeded":
        return ReportEffect.LATE_SUCCESS
    if current in TERMINAL:
        return ReportEffect.IGNORE
    if reported == "Running":
        return ReportEffect.START if current == "Scheduled" else ReportEffect.RESTARTS
    if reported in ENDINGS:
        return ReportEffect.END
    return ReportEffect.IGNORE


def late_success_blocked_by(late: P, others: Sequence[P]) -> list[P]:
    """The later attempts of the same replica that may have started (acknowledged or seen running):
    a late success wins only when there is none, else the replica could have run twice."""
    return [
        p
        for p in others
        if p.replica == late.replica
        and p.attempt > late.attempt
        and (p.acked or p.status in ("Running", "Succeeded", "Failed"))
    ]


def missing_replicas(replicas: int, placements: Sequence[PlacementFacts]) -> list[int]:
    """Replicas that need a (new) placement: not done, and whose latest attempt is not live."""
    latest: dict[int, PlacementFacts] = {}
    for placement in sorted(placements, key=lambda p: p.attempt):
        latest[placement.replica] = placement
    done = {p.replica for p in placements if p.status == "Succeeded"}
    live = ("Scheduled", "Running", "Succeeded")
    return [r for r in range(replicas) if r not in done and (r not in latest or latest[r].status not in live)]


def rerun_after_shutdown(policy: str, restarts: int, max_restarts: int) -> bool:
    """Whether a replica whose node shut down under it runs again: as the agent restarts a process
    a signal killed (a non-zero exit), within ``max_restarts`` (``restarts``: those it had)."""
    return policy in ("on-failure", "always") and restarts < max_restarts


def rerun_by_shutdown(placement: PlacementFacts) -> bool:
    """Whether ``placement`` ended Lost to run again after its node shut down: only then does a
    Lost placement have an exit code (a node presumed dead or refusing the run reports none)."""
    return placement.status == "Lost" and placement.exit_code is not None


def carried_restarts(previous: PlacementFacts | None) -> int:
    """Restarts an attempt inherits from its replica's ``previous`` attempt: that one's and one
    more when it is run again after a node shutdown; none after a node loss (it was not restarted)."""
    if previous is None or not rerun_by_shutdown(previous):
        return 0
    return (previous.restarts or 0) + 1


@dataclass(frozen=True, slots=True)
class WorkloadVerdict:
    """A workload's status from its placements; ``message``: its new message (None: keep it);
    ``stop_active``: why its active placements must stop (None: they run on)."""

    status: str
    message: str | None = None
    stop_active: str | None = None


def workload_verdict(
    replicas: int, cancel_requested: bool, placements: Sequence[PlacementFacts]
) -> WorkloadVerdict:
    """The status a workload has given its placements (oldest attempt first)."""
    latest: dict[int, PlacementFacts] = {}
    succeeded: set[int] = set()  # a replica that succeeded once is done (a late success wins)
    for placement in placements:
        latest[placement.replica] = placement
        if placement.status == "Succeeded":
            succeeded.add(placement.replica)
    states = [
        "Succeeded" if r in succeeded else latest[r].status if r in latest else None for r in range(replicas)
    ]
    active = any(p.status in ACTIVE for p in placements)
    attempts = {r: sum(1 for p in placements if p.replica == r) for r in range(replicas)}

    if cancel_requested:
        return WorkloadVerdict("Cancelling" if active else "Cancelled")
    if "Failed" in states:
        if active:
            return WorkloadVerdict("Running", stop_active="a sibling replica failed")
        failed = next(p for p in placements if p.status == "Failed")
        why = failed.message or f"exit code {failed.exit_code}"
        return WorkloadVerdict("Failed", message=f"replica {failed.replica} failed: {why}")
    if any(n >= MAX_ATTEMPTS and states[r] == "Lost" for r, n in attempts.items()):
        return WorkloadVerdict("Failed", message=f"gave up after {MAX_ATTEMPTS} attempts")
    if all(state == "Succeeded" for state in states):
        return WorkloadVerdict("Succeeded")
    if "Running" in states:
        return WorkloadVerdict("Running")
    if any(state in (None, "Lost", "Cancelled") for state in states):
        return WorkloadVerdict("Pending")
    return WorkloadVerdict("Scheduled")
