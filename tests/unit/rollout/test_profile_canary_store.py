"""A scheduling profile canary kept in the store (controlplane/policies/profile_canary.py), on a
real SQLite store and the hub's real placer: a hub that starts again goes on with a running canary
from the step it reached, places with a profile a canary promoted (when it starts with the same
``--scheduler`` profile), and rolls back a canary that was compared with another profile."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.hub.placement import PlacementNode
from controlplane.policies.profile_canary import (
    PROFILE_CANARY,
    ProfileCanaries,
    ProfileCanary,
    restore_profile_in_force,
    workload_bucket,
)
from controlplane.rollout.controller import RolloutConfig
from controlplane.scheduling.profiles import load_profile
from controlplane.store.db import sqlite_url
from controlplane.store.models import EventRow, ProfileCanaryRow
from controlplane.store.store import Store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The canary's row on both backends (JSON columns round-trip the profiles alike)."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite3")
    return str(request.getfixturevalue("postgres_url"))


CONFIG = RolloutConfig(
    steps=(0.5, 1.0), dwell_s=5.0, threshold=1.0, sustain_s=2.0, min_samples=3, recent=3, baseline_floor=0.05
)


def _placer(profile: str = "edgeplane") -> FrameworkPlacer:
    placer = FrameworkPlacer(profile)
    for name in ("n1", "n2"):
        placer.upsert_node(PlacementNode(name=name, cluster="default", region="r", cpu=64, memory=2**36))
    return placer


def _canary(
    store: Store, placer: FrameworkPlacer, now: list[float], candidate: str = "default"
) -> ProfileCanary:
    return ProfileCanary(
        candidate=load_profile(candidate),
        config=CONFIG,
        placer=placer,
        store=store,
        wake=lambda: None,
        by="operator",
        clock=lambda: now[0],
    )


async def _started(store: Store, canary: ProfileCanary) -> None:
    async with store.session() as session:
        await canary.record_start(session)
    await canary.tick()


async def _to_second_step(canary: ProfileCanary, now: list[float]) -> None:
    """Placed samples for both groups until the canary steps to its second share."""
    for i in range(40):
        now[0] = i * 0.5
        workload_id = uuid.uuid4().hex
        canary.profile_for(workload_id)
        canary.observe_placed(workload_id, 0.01)
        await canary.tick()
        if canary.controller.step == 1:
            return
    raise AssertionError(f"no step: {canary.describe()}")


async def _rows(store: Store) -> list[ProfileCanaryRow]:
    async with store.session() as s:
        return list(await s.scalars(select(ProfileCanaryRow).order_by(ProfileCanaryRow.id)))


async def _event_kinds(store: Store) -> list[str]:
    async with store.session() as s:
        rows = await s.scalars(
            select(EventRow).where(EventRow.kind.like("ProfileCanary%")).order_by(EventRow.id)
        )
        return [row.kind for row in rows]


async def test_a_running_canary_outlives_its_hub_and_goes_on_from_its_step(store_url: str) -> None:
    store = await Store.open(store_url)
    try:
        now = [0.0]
        canary = _canary(store, _placer(), now)
        await _started(store, canary)
        await _to_second_step(canary, now)
        assert canary.fraction == 1.0
        (row,) = await _rows(store)
        assert (row.state, row.step, row.fraction) == ("canary", 1, 1.0)
        assert [e["kind"] for e in row.events] == ["start", "step"]

        # The next hub (same --scheduler profile) starts: the canary goes on at its second step.
        placer = _placer()
        listeners: list[Any] = []
        canaries = ProfileCanaries(placer, store, wake=lambda: None, outcome_listeners=listeners)
        resumed = await canaries.resume()
        try:
            assert resumed is not None and resumed.row_id == row.id
            assert listeners == [resumed.observe_outcome]  # its outcome guard hears the hub
            assert (resumed.state, resumed.fraction, resumed.controller.step) == ("canary", 1.0, 1)
            assert [e["kind"] for e in resumed.describe()["events"]] == ["start", "step"]
            assert resumed.controller.samples == {"canary": 0, "control": 0}  # judged afresh
            assert placer.profile_for is not None
            workload = uuid.uuid4().hex
            assert placer.profile_of(workload) == "default"  # at 100% every new workload is the candidate's
            assert (await canaries.describe())["state"] == "canary"
        finally:
            await canaries.stop()
        assert placer.profile_for is None  # a stopped hub leaves no workload with the candidate
        assert listeners == []  # nor a listener: the hub measures no outcome for nobody
    finally:
        await store.close()


async def test_an_accepted_canary_whose_hub_stopped_before_its_start_starts_at_the_next(
    store_url: str,
) -> None:
    store = await Store.open(store_url)
    try:
        canary = _canary(store, _placer(), [0.0])
        async with store.session() as session:
            await canary.record_start(session)  # kept before the 201; the hub stops right after
        placer = _placer()
        canaries = ProfileCanaries(placer, store, wake=lambda: None)
        resumed = await canaries.resume()
        try:
            assert resumed is not None and (resumed.state, resumed.fraction) == ("canary", 0.5)
            low = next(i for i in (uuid.uuid4().hex for _ in range(1000)) if workload_bucket(i) < 50)
            assert placer.profile_of(low) == "default"
        finally:
            await canaries.stop()
        (row,) = await _rows(store)
        assert [e["kind"] for e in row.events] == ["start"]
        assert await _event_kinds(store) == ["ProfileCanaryStarted"]
    finally:
        await store.close()


async def test_a_promoted_profile_is_in_force_again_for_a_hub_started_with_the_same_profile(
    store_url: str,
) -> None:
    store = await Store.open(store_url)
    try:
        now = [0.0]
        canary = _canary(store, _placer(), now)
        await _started(store, canary)
        await _to_second_step(canary, now)
        for _ in range(40):
            now[0] += 0.5
            workload_id = uuid.uuid4().hex
            canary.profile_for(workload_id)
            canary.observe_placed(workload_id, 0.01)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "promoted", canary.describe()

        same = _placer("edgeplane")
        restored = await restore_profile_in_force(store, same)
        assert restored is not None and same.current_profile.name == "default"
        assert same.base_profile.name == "edgeplane"

        other = _placer("binpack")  # an operator who starts the hub with another profile means it
        assert await restore_profile_in_force(store, other) is None
        assert other.current_profile.name == "binpack"

        described = await ProfileCanaries(same, store, wake=lambda: None).describe()
        assert (described["profile"], described["state"], described["previous"]) == (
            "default",
            "promoted",
            "edgeplane",
        )
        assert [e["kind"] for e in described["events"]] == ["start", "step", "promote"]
    finally:
        await store.close()


async def test_a_canary_compared_with_another_profile_is_rolled_back_at_the_start(store_url: str) -> None:
    store = await Store.open(store_url)
    try:
        await _started(store, _canary(store, _placer("edgeplane"), [0.0]))
        placer = _placer("binpack")
        canaries = ProfileCanaries(placer, store, wake=lambda: None)
        assert await canaries.resume() is None
        assert placer.profile_for is None
        (row,) = await _rows(store)
        assert row.state == "rolled_back"
        assert "'binpack' in force, not 'edgeplane'" in row.events[-1]["reason"]
        assert await _event_kinds(store) == ["ProfileCanaryStarted", "ProfileCanaryRolledBack"]
        assert await canaries.resume() is None  # ended once, not again
        assert await _event_kinds(store) == ["ProfileCanaryStarted", "ProfileCanaryRolledBack"]
    finally:
        await store.close()


async def test_a_canary_started_through_the_keeper_is_kept_before_it_answers(store_url: str) -> None:
    store = await Store.open(store_url)
    try:
        placer = _placer()
        canaries = ProfileCanaries(placer, store, wake=lambda: None)
        request = PROFILE_CANARY.parse({"profile": "default", "steps": [50, 100], "dwell_s": 600})
        canary = await canaries.start(request, by="operator")
        try:
            (row,) = await _rows(store)
            assert (row.id, row.state, row.fraction, row.started_by) == (
                canary.row_id,
                "canary",
                0.5,
                "operator",
            )
            assert row.base["name"] == row.previous["name"] == "edgeplane"
            assert RolloutConfig.from_json(row.config) == canary.controller.config
        finally:
            await canaries.stop()
    finally:
        await store.close()
