"""Live interference learning: the hub learns from what agents observed of successful runs, once per
placement, from history when no expected runtime is given, and keeps it across a restart."""

from __future__ import annotations

import uuid

from harness import register_message, running_hub, spawn_agent, wait_for
from sqlalchemy import select

from edgeplane_contract.messages import (
    PlacementState,
    RuntimeObservation,
    StatusReportV1,
)

from controlplane.store.models import RuntimeObservationRow

QUIET = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # all of it below 20 % CPU
BUSY = [0.0] * 9 + [3.0]  # all of it above 90 %


def _report(placement_id: str, workload_id: str, state: str, observation=None) -> StatusReportV1:
    return StatusReportV1(
        report_id=uuid.uuid4().hex,
        node="a",
        placement=PlacementState(placement_id, workload_id, state, exit_code=0, observation=observation),
    )


async def _succeed(hub, api, body: dict, observation: RuntimeObservation | None) -> tuple[str, str]:
    """Post a workload, let it start on node a and report it Succeeded with ``observation``."""
    workload_id = await api.post_workload(body)
    placed = await wait_for(lambda: api.workload(workload_id), lambda w: bool(w["placements"]))
    placement_id = placed["placements"][0]["id"]
    await hub.handle_report("a", _report(placement_id, workload_id, "Running"))
    await hub.handle_report("a", _report(placement_id, workload_id, "Succeeded", observation))
    assert (await api.workload(workload_id))["status"] == "Succeeded"
    return workload_id, placement_id


async def _rows(hub) -> list[RuntimeObservationRow]:
    async with hub.store.session() as s:
        return list((await s.scalars(select(RuntimeObservationRow).order_by(RuntimeObservationRow.id))).all())


async def test_a_success_feeds_the_estimate_once_however_often_it_is_reported(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=8.0, memory=2**33))).accepted
        observation = RuntimeObservation(runtime_s=3.0, load_seconds=BUSY)
        body = {"name": "once", "command": ["true"], "expected_runtime_s": 1.5}
        workload_id, placement_id = await _succeed(hub, api, body, observation)
        again = _report(placement_id, workload_id, "Succeeded", observation)
        await hub.handle_report("a", again)
        await hub.handle_report("a", again)  # the same report id: dropped at once
        await hub.handle_report("a", _report(placement_id, workload_id, "Succeeded", observation))
        # The agent's registration re-sends its final states: no second count either.
        reregister = register_message("a", cpu=8.0, memory=2**33)
        reregister.placements = [again.placement]
        assert (await hub.handle_register("a", reregister)).accepted
        learned = await api.get("/v1/scheduler/interference")
        assert learned["learning"] is True
        assert learned["observations"] == {"batch": 1}
        assert learned["reports"]["learned"] == 1
        # The SLA-miss risk counted the same single outcome: it ran 2x its expected runtime, so
        # at every load the one thing known is that 1.5x was missed.
        assert learned["sla_risk"] == {
            "at_ratio": 1.5,
            "by_load": {"batch": [1.0] * 10},
            "observations": {"batch": 1},
        }
        rows = await _rows(hub)
        assert [(r.placement_id, r.expected_s, r.runtime_s, r.quiet) for r in rows] == [
            (placement_id, 1.5, 3.0, False)
        ]


async def test_without_an_expected_runtime_the_fastest_quiet_run_of_the_same_workload_is_the_baseline(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=8.0, memory=2**33))).accepted
        body = {"name": "nightly", "command": ["true"]}
        # A busy first run is no baseline; nothing to compare it with: stored, not learned.
        await _succeed(hub, api, body, RuntimeObservation(runtime_s=3.0, load_seconds=BUSY))
        await _succeed(hub, api, body, RuntimeObservation(runtime_s=2.0, load_seconds=QUIET))
        assert hub.learning.outcomes["no_baseline"] == 2
        assert hub.learning.estimate().observations == {}
        # Another workload's quiet run is not this one's baseline.
        await _succeed(
            hub, api, {**body, "name": "other"}, RuntimeObservation(runtime_s=0.5, load_seconds=QUIET)
        )
        await _succeed(hub, api, body, RuntimeObservation(runtime_s=4.0, load_seconds=BUSY))
        rows = await _rows(hub)
        assert [(r.workload_name, r.expected_s) for r in rows] == [
            ("nightly", None),
            ("nightly", None),
            ("other", None),
            ("nightly", 2.0),
        ]
        assert hub.learning.outcomes["learned"] == 1
        assert hub.learning.estimate().observations == {"batch": 1}


async def test_an_invalid_observation_is_counted_and_ignored_and_the_success_still_applies(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=8.0, memory=2**33))).accepted
        wrong_bins = RuntimeObservation(runtime_s=3.0, load_seconds=[1.0, 2.0])
        body = {"name": "odd", "command": ["true"], "expected_runtime_s": 1.0}
        await _succeed(hub, api, body, wrong_bins)  # asserts the workload Succeeded
        assert hub.learning.outcomes["invalid"] == 1
        assert await _rows(hub) == []
        metrics = await api.session.get(api.base + "/metrics")
        text = await metrics.text()
        assert 'edgeplane_interference_reports_total{outcome="invalid"} 1.0' in text


async def test_stored_observations_are_replayed_after_a_hub_restart_and_only_the_newest_kept(
    nats_server, sqlite_url
):
    async with running_hub(
        nats_server.url, sqlite_url, lease_missed_heartbeats=400, runtime_observations_kept=2
    ) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=8.0, memory=2**33))).accepted
        for i, runtime in enumerate((2.0, 3.0, 4.0)):
            body = {"name": f"keep-{i}", "command": ["true"], "expected_runtime_s": 1.0, "kind": "analytics"}
            await _succeed(hub, api, body, RuntimeObservation(runtime_s=runtime, load_seconds=BUSY))
        before = hub.learning.estimate()
        assert before.observations == {"analytics": 3}
        assert [r.runtime_s for r in await _rows(hub)] == [3.0, 4.0]
    async with running_hub(nats_server.url, sqlite_url, lease_missed_heartbeats=400) as (running, api):
        learned = await api.get("/v1/scheduler/interference")
        assert learned["observations"] == {"analytics": 2}
        assert learned["reports"]["learned"] == 0  # none arrived since this start
        assert learned["sensitivity"]["analytics"] > 0
        assert learned["sla_risk"]["observations"] == {"analytics": 2}  # replayed, and in use:
        scores = running.hub.placer.scheduler.plugins.scorers  # type: ignore[attr-defined]
        assert any(getattr(plugin, "sla_risk", None) is not None for plugin, _, _ in scores)


async def test_a_real_agent_s_success_reaches_the_estimate_exactly_once(nats_server, sqlite_url, tmp_path):
    """End to end: nats-server, the hub, an ``edge-agent run`` process sampling its node's load."""
    agent = spawn_agent(nats_server.url, "learn1", tmp_path, cpu="2")
    try:
        async with running_hub(nats_server.url, sqlite_url) as (running, api):
            await wait_for(api.nodes, lambda n: len(n) == 1 and n[0]["status"] == "Ready")
            body = {"name": "short", "command": ["sleep", "1.2"], "expected_runtime_s": 1.0}
            workload_id = await api.post_workload(body)
            await api.wait_status(workload_id, "Succeeded")
            learned = await wait_for(
                lambda: api.get("/v1/scheduler/interference"), lambda b: b["observations"] != {}
            )
            assert learned["observations"] == {"batch": 1}
            assert learned["reports"] == {"learned": 1, "no_baseline": 0, "ignored": 0, "invalid": 0}
            (row,) = await _rows(running.hub)
            assert row.expected_s == 1.0 and 1.0 <= row.runtime_s < 10.0
            # The seconds binned cover the run (sampled every second, the rest at its end).
            assert abs(sum(row.load_seconds) - row.runtime_s) < 0.5
            metrics = await (await api.session.get(api.base + "/metrics")).text()
            assert 'edgeplane_interference_observations{kind="batch"} 1.0' in metrics
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=10)


async def test_successes_reported_in_one_batch_are_stored_once_each_with_earlier_quiet_runs_as_baseline(
    nats_server, sqlite_url
):
    """A batch of reports (the bus applies up to 256 in one transaction) stores its successes in
    a few statements: a quiet run earlier in the batch is the baseline of the later ones, a
    success sent twice in the batch is stored once, and the trim keeps the newest ``keep``."""
    async with running_hub(
        nats_server.url, sqlite_url, lease_missed_heartbeats=400, runtime_observations_kept=3
    ) as (running, api):
        hub = running.hub
        assert (await hub.handle_register("a", register_message("a", cpu=8.0, memory=2**33))).accepted
        placed = []
        for _ in range(4):
            workload_id = await api.post_workload({"name": "batch", "command": ["true"]})
            got = await wait_for(lambda w=workload_id: api.workload(w), lambda w: bool(w["placements"]))
            placed.append((got["placements"][0]["id"], workload_id))
        await hub.handle_reports([("a", _report(p, w, "Running")) for p, w in placed])
        runs = [(3.0, BUSY), (2.0, QUIET), (4.0, BUSY), (1.0, QUIET)]
        batch = [
            ("a", _report(p, w, "Succeeded", RuntimeObservation(runtime_s=r, load_seconds=load)))
            for (p, w), (r, load) in zip(placed, runs, strict=True)
        ]
        batch.insert(
            2, ("a", _report(*placed[1], "Succeeded", RuntimeObservation(runtime_s=9.0, load_seconds=BUSY)))
        )
        await hub.handle_reports(batch)
        for _, workload_id in placed:
            assert (await api.workload(workload_id))["status"] == "Succeeded"
        rows = await _rows(hub)
        # The first of the four was trimmed (keep 3); the resent success left no second row.
        assert [(r.placement_id, r.runtime_s, r.expected_s, r.quiet) for r in rows] == [
            (placed[1][0], 2.0, None, True),
            (placed[2][0], 4.0, 2.0, False),
            (placed[3][0], 1.0, 2.0, True),
        ]
        assert hub.learning.outcomes["no_baseline"] == 2
        assert hub.learning.outcomes["learned"] + hub.learning.outcomes["ignored"] == 2
