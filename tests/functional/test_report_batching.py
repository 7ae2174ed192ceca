"""Status reports applied in batches (issue 21): reports that arrive together are applied in one
transaction and acked only once it committed; a batch that fails part way loses nothing and
applies nothing twice (each report is tried alone, and only the ones applied are acked)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from harness import register_message, running_hub, wait_for
from nats.aio.client import Client as NATS
from sqlalchemy import event

from edgeplane_contract.messages import (
    DEFAULT_PREFIX,
    PlacementState,
    ReportAckV1,
    StatusReportV1,
    Subjects,
    decode,
    encode,
)

from controlplane.hub.dispatch import Dispatcher
from controlplane.hub.learning import InterferenceLearning
from controlplane.hub.spec_cache import SpecCache

pytestmark = [pytest.mark.timeout(60)]

SUBJECTS = Subjects(cluster="default", prefix=DEFAULT_PREFIX)


def _report(node: str, placement_id: str, workload_id: str, state: str, exit_code: int = 0) -> StatusReportV1:
    return StatusReportV1(
        report_id=uuid.uuid4().hex,
        node=node,
        placement=PlacementState(
            placement_id=placement_id, workload_id=workload_id, state=state, exit_code=exit_code
        ),
    )


async def _send(nc: NATS, report: StatusReportV1, *, timeout: float = 3.0) -> bool:
    """Send a report as its agent does; True once the hub acked it."""
    try:
        reply = await nc.request(SUBJECTS.report(report.node), encode(report), timeout=timeout)
    except Exception:
        return False
    return decode(reply.data, ReportAckV1).report_id == report.report_id


async def _placed_workloads(api: Any, count: int) -> list[tuple[str, str]]:
    """``count`` workloads POSTed and placed on node a: (workload id, placement id) each."""
    ids = [await api.post_workload({"name": f"batch-{i}", "command": ["true"]}) for i in range(count)]
    placed = []
    for workload_id in ids:
        workload = await wait_for(lambda w=workload_id: api.workload(w), lambda w: bool(w["placements"]))
        placed.append((workload_id, workload["placements"][0]["id"]))
    return placed


def _count_commits(engine: Any) -> list[int]:
    commits = [0]

    @event.listens_for(engine.sync_engine, "commit")
    def _committed(_conn: Any) -> None:
        commits[0] += 1

    return commits


async def _events(api: Any, kind: str) -> list[dict[str, Any]]:
    return list((await api.get(f"/v1/events?kind={kind}&limit=1000"))["items"])


async def test_reports_sent_together_are_applied_in_a_few_transactions_and_each_acked(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=64.0, memory=2**36))).accepted
        placed = await _placed_workloads(api, 40)
        reports = [_report("a", p, w, state) for w, p in placed for state in ("Running", "Succeeded")]
        commits = _count_commits(hub.store.engine)
        nc = NATS()
        await nc.connect(nats_server.url)
        try:
            acked = await asyncio.gather(*(_send(nc, r) for r in reports))
        finally:
            await nc.close()
        assert all(acked), f"{acked.count(False)} of {len(reports)} reports not acked"
        # 80 reports at once: a handful of batches (the reconcile loop commits too), not 80.
        assert commits[0] < len(reports) // 4, commits[0]
        for workload_id, _ in placed:
            assert (await api.workload(workload_id))["status"] == "Succeeded"
        succeeded = await _events(api, "PlacementSucceeded")
        assert sorted(e["data"]["placement_id"] for e in succeeded) == sorted(p for _, p in placed)


async def test_a_batch_that_fails_part_way_applies_the_others_once_and_acks_only_them(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=64.0, memory=2**36))).accepted
        placed = await _placed_workloads(api, 6)
        (bad_workload, bad_placement), good = placed[0], placed[1:]
        # An exit code SQLite cannot store: the batch's transaction fails when it is written.
        bad = _report("a", bad_placement, bad_workload, "Failed", exit_code=2**70)
        goods = [_report("a", p, w, "Succeeded") for w, p in good]
        nc = NATS()
        await nc.connect(nats_server.url)
        try:
            acked = await asyncio.gather(*(_send(nc, r, timeout=2.0) for r in [bad, *goods]))
            assert acked == [False] + [True] * len(goods), acked
            # An agent that missed an ack sends the report again: acked, applied no second time.
            assert await _send(nc, goods[0])
        finally:
            await nc.close()
        for workload_id, _ in good:
            assert (await api.workload(workload_id))["status"] == "Succeeded"
        assert (await api.workload(bad_workload))["status"] != "Failed"
        succeeded = await _events(api, "PlacementSucceeded")
        assert sorted(e["data"]["placement_id"] for e in succeeded) == sorted(p for _, p in good)


async def test_an_empty_spec_cache_given_to_the_hub_parts_is_the_one_they_use() -> None:
    # An empty SpecCache is falsy (it has a length): ``specs or SpecCache()`` gave every part a
    # cache of its own, so each parsed every spec again from the store.
    cache = SpecCache()
    dispatcher = Dispatcher(None, {}, resend_after_s=1.0, specs=cache)  # type: ignore[arg-type]
    learning = InterferenceLearning(None, specs=cache)  # type: ignore[arg-type]
    assert dispatcher.specs is cache and learning.specs is cache
