"""A scheduling profile change as a canary (controlplane/policies/profile_canary.py), on the hub's
real placer, placement round and a SQLite store: a candidate profile that places nothing is
reverted by the controller and its workloads are then placed by the profile in force; a candidate
that places as well is promoted and becomes the profile in force; bad requests are refused by
field."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from controlplane.errors import ValidationError
from controlplane.hub import placing as placing_module
from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.hub.placement import PlacementNode
from controlplane.hub.placing import PlacementRound
from controlplane.hub.registry import NodeRegistry
from controlplane.hub.workloads import PlacementBook
from controlplane.observe.hub import HubMetrics
from controlplane.policies.profile_canary import PROFILE_CANARY, ProfileCanary, workload_bucket
from controlplane.rollout.controller import RolloutConfig
from controlplane.scheduling.model import ResourceRequest, WorkloadRequest
from controlplane.scheduling.profiles import load_profile, parse_profile
from controlplane.scheduling.scheduler import Scheduler
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.db import sqlite_url
from controlplane.store.models import EventRow, WorkloadRow
from controlplane.store.store import Store

# A profile change whose quota bins no node can hold: every workload it places waits (1000x the
# request: 64x of a half-core workload still fits the 64-core nodes here, and the first few of
# the candidate's share were placed, which made the rollback test depend on the ids drawn).
OVERSIZED = {
    "name": "oversized",
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeResourcesLeastAllocated"},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"cpu_bins": [1000.0]},
}


def _request(workload_id: str, cpu: float = 1.0) -> WorkloadRequest:
    return WorkloadRequest(id=workload_id, resources=ResourceRequest(cpu=cpu, memory=2**20))


def test_two_profiles_place_over_the_same_nodes_and_reservations() -> None:
    scheduler = Scheduler("default")
    scheduler.upsert_node(
        FrameworkPlacer._state(PlacementNode(name="n1", cluster="default", region="r", cpu=2, memory=2**30))
    )
    binpack = load_profile("binpack")
    assert scheduler.schedule(_request("w1"), profile=binpack).placements[0].node == "n1"
    assert scheduler.schedule(_request("w2")).placements[0].node == "n1"
    assert scheduler.schedule(_request("w3"), enqueue=False).placements[0].node is None  # both took a cpu
    scheduler.use_profile(binpack)  # promoted: the same nodes and reservations
    assert scheduler.profile is binpack
    assert scheduler.schedule(_request("w3"), enqueue=False).placements[0].node is None
    scheduler.release("w1")
    assert scheduler.schedule(_request("w3"), enqueue=False).placements[0].node == "n1"


def test_a_profile_with_other_quota_bins_does_not_change_what_the_others_find() -> None:
    # The node table caches what never fits per request shape: the bins are part of that shape
    # (a cache keyed by the request alone gave the candidate's "never fits" to the profile in
    # force, and nothing was placed at all).
    scheduler = Scheduler("default")
    scheduler.upsert_node(
        FrameworkPlacer._state(PlacementNode(name="n1", cluster="default", region="r", cpu=4, memory=2**30))
    )
    oversized = parse_profile(OVERSIZED)
    assert scheduler.schedule(_request("w1"), profile=oversized, enqueue=False).placements[0].node is None
    assert scheduler.schedule(_request("w2"), enqueue=False).placements[0].node == "n1"
    assert scheduler.schedule(_request("w3"), profile=oversized, enqueue=False).placements[0].node is None


async def _round(tmp_path: Path, profile: str = "edgeplane") -> tuple[Store, FrameworkPlacer, PlacementRound]:
    store = await Store.open(sqlite_url(tmp_path / "db.sqlite3"))
    placer = FrameworkPlacer(profile)
    for name in ("n1", "n2"):
        placer.upsert_node(PlacementNode(name=name, cluster="default", region="r", cpu=64, memory=2**36))
    active: dict[str, tuple[str, int, str]] = {}
    book = PlacementBook(placer, active, wake=lambda: None)
    registry = cast(NodeRegistry, cast(Any, None))  # no bid rounds (deadline 0)
    placing = PlacementRound(store, placer, registry, book, active, bid_deadline_ms=0, metrics=HubMetrics())
    return store, placer, placing


async def _add(store: Store, placing: PlacementRound, n: int) -> list[str]:
    ids = [uuid.uuid4().hex for _ in range(n)]
    now = time.time()
    async with store.session() as s:
        for workload_id in ids:
            spec = WorkloadSpec.parse({"name": "w", "command": ["true"], "resources": {"cpu": 0.5}})
            s.add(
                WorkloadRow(
                    id=workload_id, name="w", status="Pending", message="", spec=spec.to_dict(),
                    replicas=1, priority=0, cancel_requested=False, created_at=now, updated_at=now,
                )
            )  # fmt: skip
    return ids


async def _statuses(store: Store, ids: list[str]) -> dict[str, str]:
    async with store.session() as s:
        return {i: (await s.get(WorkloadRow, i)).status for i in ids}  # type: ignore[union-attr]


async def _events(store: Store, prefix: str) -> list[str]:
    async with store.session() as s:
        rows = (await s.execute(EventRow.__table__.select())).all()
    return [row.kind for row in rows if row.kind.startswith(prefix)]


def _canary(
    candidate: dict[str, Any] | str, placer: FrameworkPlacer, store: Store, now: list[float]
) -> ProfileCanary:
    config = RolloutConfig(
        steps=(0.5, 1.0),
        dwell_s=20.0,
        threshold=1.0,
        sustain_s=2.0,
        min_samples=3,
        recent=3,
        baseline_floor=0.05,
    )
    profile = parse_profile(candidate) if isinstance(candidate, dict) else load_profile(candidate)
    return ProfileCanary(
        candidate=profile,
        config=config,
        placer=placer,
        store=store,
        wake=lambda: None,
        by="t",
        clock=lambda: now[0],
    )


async def test_a_candidate_that_places_nothing_is_reverted_and_its_workloads_placed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hub asks about a waiting workload again at least every RETRY_ALL_S of its clock; here
    # the canary's clock is the test's (0.5 s a round), so every round asks about every one.
    monkeypatch.setattr(placing_module, "RETRY_ALL_S", 0.0)
    store, placer, placing = await _round(tmp_path)
    try:
        now = [0.0]
        canary = _canary(OVERSIZED, placer, store, now)
        placing.placed_listeners.append(canary.observe_placed)
        await canary.tick()  # the start: half the new workloads go to the candidate
        assert canary.state == "canary" and placer.profile_for is not None
        ids: list[str] = []
        for step in range(40):
            now[0] = step * 0.5
            ids += await _add(store, placing, 2)
            await placing.place_pending()
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", str(canary.describe())
        assert now[0] < 10.0  # judged on placement delays, long before the first step's dwell ended
        described = canary.describe()
        assert described["scores"]["canary"] > 1.0 and described["scores"]["control"] <= 1.0
        assert "rollback" in described["events"][-1]["kind"]
        waiting = [i for i, status in (await _statuses(store, ids)).items() if status == "Pending"]
        assert waiting and all(workload_bucket(i) < 50 for i in waiting)  # the candidate's share waited
        assert placer.profile_for is None and placer.current_profile.name == "edgeplane"
        await placing.place_pending()  # the profile in force places them now
        assert set((await _statuses(store, ids)).values()) == {"Scheduled"}
        assert await _events(store, "ProfileCanary") == ["ProfileCanaryStarted", "ProfileCanaryRolledBack"]
    finally:
        await store.close()


async def test_a_candidate_that_places_as_well_is_promoted_and_placed_by_after(tmp_path: Path) -> None:
    store, placer, placing = await _round(tmp_path)
    try:
        now = [0.0]
        canary = _canary("default", placer, store, now)
        placing.placed_listeners.append(canary.observe_placed)
        await canary.tick()
        for step in range(200):
            now[0] = step * 0.5
            await _add(store, placing, 2)
            await placing.place_pending()
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "promoted", canary.describe()
        assert placer.current_profile.name == "default" and placer.profile_for is None
        assert placer.scheduler.profile.name == "default"
        assert await _events(store, "ProfileCanary") == [
            "ProfileCanaryStarted", "ProfileCanaryStep", "ProfileCanaryPromoted"
        ]  # fmt: skip
    finally:
        await store.close()


async def test_a_candidate_that_places_at_once_but_badly_is_reverted_by_the_outcome_guard(
    tmp_path: Path,
) -> None:
    # Both profiles place at once, so placement delays say nothing; the candidate's workloads then
    # run three times over their SLA (as where it packs them onto a slow node), the others within.
    store, placer, placing = await _round(tmp_path)
    try:
        now = [0.0]
        canary = _canary("default", placer, store, now)
        placing.placed_listeners.append(canary.observe_placed)
        await canary.tick()
        for step in range(80):
            now[0] = step * 0.5
            ids = await _add(store, placing, 2)
            await placing.place_pending()
            for workload_id in ids:
                bad = placer.profile_of(workload_id) == "default"
                canary.observe_outcome("n1", 3.0 if bad else 0.5, workload_id)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", canary.describe()
        assert now[0] < 20.0  # within the first step's dwell
        described = canary.describe()
        assert described["events"][-1]["reason"].startswith("outcomes against SLA: canary score")
        assert described["outcome_scores"]["canary"] > 1.0 >= described["outcome_scores"]["control"]
        assert described["scores"]["canary"] <= 1.0  # not the placement delays
        canary.observe_outcome("n1", 3.0, uuid.uuid4().hex)  # a workload it never placed: no sample
        assert sum(described["outcome_samples"].values()) == sum(canary.outcomes.samples.values())
    finally:
        await store.close()


async def test_a_candidate_that_delays_one_kind_only_is_reverted_by_that_kinds_guard(tmp_path: Path) -> None:
    # One inference workload in thirty per group: in the pooled window of 30 samples the canary's
    # one slow placement sits under the 95th percentile, so only the per-kind signal sees it.
    store, placer, _ = await _round(tmp_path)
    try:
        now = [0.0]
        config = RolloutConfig(
            steps=(0.5, 1.0), dwell_s=600.0, threshold=1.0, sustain_s=2.0, min_samples=3, recent=30,
            baseline_floor=0.05,
        )  # fmt: skip
        canary = ProfileCanary(
            candidate=load_profile("default"), config=config, placer=placer, store=store,
            wake=lambda: None, by="t", clock=lambda: now[0],
        )  # fmt: skip
        await canary.tick()
        fresh = (uuid.uuid4().hex for _ in range(100_000))

        def asked(group: str, kind: str) -> str:
            workload_id = next(i for i in fresh if (workload_bucket(i) < 50) == (group == "canary"))
            canary.profile_for(workload_id, kind)
            return workload_id

        for step in range(40):
            now[0] = step * 0.5
            # Each round: 29 batch workloads and 1 inference workload per group, placed 0.4 s
            # after they were first asked for; the canary's inference one would have taken 2 s
            # (its sample is capped at the 0.4 s since it was asked).
            batch = [(asked(g, "batch"), 0.01) for _ in range(29) for g in ("canary", "control")]
            inference = [(asked("canary", "inference"), 2.0), (asked("control", "inference"), 0.01)]
            now[0] += 0.4
            for workload_id, delay_s in [*batch, *inference]:
                canary.observe_placed(workload_id, delay_s)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", canary.describe()
        described = canary.describe()
        assert described["events"][-1]["reason"].startswith(
            "inference workloads' placement delay: canary score"
        )
        assert described["scores"]["canary"] <= 1.0  # the pooled signal did not see it
        delay = {c["name"]: c["signals"][0] for c in described["classes"]}
        assert delay["inference"]["signal"] == "delay"
        assert delay["inference"]["scores"]["canary"] > 1.0 >= delay["batch"]["scores"]["canary"]
        assert delay["inference"]["samples"]["canary"] >= 3
    finally:
        await store.close()


async def test_a_waiting_workload_no_round_asks_about_any_more_is_not_sampled(tmp_path: Path) -> None:
    # A cancelled workload is no longer Pending: the rounds stop asking for its profile, and its
    # age must not count as a placement that never comes.
    store, placer, _ = await _round(tmp_path)
    try:
        now = [0.0]
        canary = _canary(OVERSIZED, placer, store, now)
        await canary.tick()
        waiting = next(i for i in (uuid.uuid4().hex for _ in range(1000)) if workload_bucket(i) < 50)
        assert canary.profile_for(waiting) is canary.candidate
        now[0] = 3.0
        await canary.tick()
        assert canary.controller.samples["canary"] == 1  # asked 3 s ago: still waiting, sampled
        now[0] = 9.0
        await canary.tick()
        assert canary.controller.samples["canary"] == 1  # not asked for 9 s: not sampled again
    finally:
        await store.close()


def test_a_workload_keeps_its_group_and_larger_shares_take_the_smaller_ones_workloads() -> None:
    ids = [uuid.uuid4().hex for _ in range(400)]
    ten = {i for i in ids if workload_bucket(i) < 10}
    fifty = {i for i in ids if workload_bucket(i) < 50}
    assert ten < fifty and 0 < len(ten) < len(fifty) < len(ids)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({}, "profile", "required"),
        ({"profile": "no-such-profile"}, "profile", "not a built-in profile"),
        ({"profile": "/etc/passwd"}, "profile", "not a built-in profile"),
        ({"profile": 7}, "profile", "built-in profile's name or a profile object"),
        ({"profile": {"name": "x", "plugins": [{"name": "NoSuchPlugin"}]}}, "profile", "NoSuchPlugin"),
        ({"profile": "default", "steps": [50, 10]}, "steps", "rising"),
        ({"profile": "default", "threshold": 0}, "threshold", "above 0"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(body: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        PROFILE_CANARY.parse(body, "")
    assert caught.value.field is not None and caught.value.field.endswith(field), caught.value.field
    assert words in str(caught.value)


def test_a_candidate_that_learns_scores_with_what_the_scheduler_learned() -> None:
    """A profile canary's candidate is judged as it would place once promoted: where it learns
    interference too, its scores use the estimate the scheduler learned online (now and at each
    refit); one with a fixed model keeps its prior."""
    from controlplane.scheduling.interference import LoadProfile

    scheduler = Scheduler("edgeplane")
    prior = scheduler.plugins.reward_config
    loaded = LoadProfile([0.0] * 9 + [2.0])
    for _ in range(scheduler.interference_refresh):
        scheduler.observe_runtime("batch", 1.0, 3.0, loaded)
    learned = scheduler.plugins.reward_config
    assert learned.sensitivity["batch"] != prior.sensitivity["batch"]  # it did learn something

    copy = parse_profile({**load_profile("edgeplane").to_dict(), "name": "edgeplane-copy"})
    candidate = scheduler._placer_of(copy).plugins.reward_config
    assert (candidate.knee, candidate.sensitivity) == (learned.knee, learned.sensitivity)
    fixed = scheduler._placer_of(load_profile("edgeplane-static")).plugins.reward_config
    assert fixed.sensitivity["batch"] == prior.sensitivity["batch"]  # a fixed model keeps its prior

    for _ in range(scheduler.interference_refresh):  # a refit reaches the candidate too
        scheduler.observe_runtime("batch", 1.0, 1.0, loaded)
    refit = scheduler.plugins.reward_config
    assert refit.sensitivity["batch"] != learned.sensitivity["batch"]
    assert scheduler._placer_of(copy).plugins.reward_config.sensitivity == refit.sensitivity
