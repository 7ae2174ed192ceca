"""The agent's durable outbox: final reports outlive the agent, stale ones do not."""

from __future__ import annotations

import uuid

from edgeplane_contract.messages import PlacementState, StatusReportV1

from edge_agent.outbox import DurableOutbox


def _report(placement: str, state: str) -> StatusReportV1:
    return StatusReportV1(
        report_id=uuid.uuid4().hex,
        node="n",
        placement=PlacementState(placement_id=placement, workload_id="w", state=state),
    )


def test_final_reports_survive_a_restart_in_order_and_acknowledged_ones_do_not(tmp_path):
    path = tmp_path / "outbox.sqlite3"
    outbox = DurableOutbox(path)
    reports = [
        _report("p1", "Running"),
        _report("p1", "Succeeded"),
        _report("p2", "Failed"),
        _report("p3", "Cancelled"),
    ]
    for report in reports:
        outbox.append(report)
    assert outbox.popleft() is reports[0]  # acknowledged
    outbox.close()
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)

    again = DurableOutbox(path)
    assert [r.report_id for r in [again[i] for i in range(len(again))]] == [r.report_id for r in reports[1:]]
    assert {s.placement_id: s.state for s in again.latest_states()} == {
        "p1": "Succeeded", "p2": "Failed", "p3": "Cancelled"
    }  # fmt: skip
    again.append(_report("p4", "Running"))  # of this run: true now, stale after a restart
    again.close()
    assert [again_r.placement.placement_id for again_r in DurableOutbox(path)._queue] == ["p1", "p2", "p3"]


def test_an_unusable_file_leaves_an_in_memory_outbox(tmp_path):
    path = tmp_path / "outbox.sqlite3"
    path.write_bytes(b"not a database" * 100)
    outbox = DurableOutbox(path)
    outbox.append(_report("p1", "Succeeded"))
    assert len(outbox) == 1 and outbox.popleft().placement.placement_id == "p1" and not outbox
