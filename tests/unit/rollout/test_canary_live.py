"""The live canary's outcome guard (controlplane/policies/canary_live.py) on a real SQLite store:
work on the canary's nodes finishing far over its SLA rolls the version back even while the
decisions' regret says nothing is wrong."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from controlplane.hub.nodes import NodeLive
from controlplane.policies.canary_live import LiveCanary
from controlplane.policies.registry import PolicyRegistry
from controlplane.rollout.controller import RolloutConfig
from controlplane.store.db import sqlite_url
from controlplane.store.models import PolicyRow
from controlplane.store.store import Store


class StandInHub:
    def __init__(self) -> None:
        self.nodes = {name: NodeLive(name, "c", "Ready", "b", 3.0, 0.0) for name in ("n1", "n2", "n3", "n4")}
        self.policy_regret_listeners: list[Any] = []
        self.placement_outcome_listeners: list[Any] = []


async def test_outcomes_far_over_their_sla_on_canary_nodes_roll_the_version_back(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "db.sqlite3"))
    try:
        async with store.session() as s:
            s.add(
                PolicyRow(
                    sha256="a" * 64, size=1, model=b"x", meta={}, description="", evaluation={},
                    created_at=time.time(), created_by="t", state="available",
                )
            )  # fmt: skip
        registry = PolicyRegistry(store)
        hub = StandInHub()
        now = [0.0]
        config = RolloutConfig(
            steps=(0.5, 1.0), dwell_s=60, sustain_s=2, threshold=0.5, min_samples=5, recent=5
        )
        canary = LiveCanary(
            version=1,
            config=config,
            registry=registry,
            hub=hub,
            wake=lambda: None,
            by="t",
            clock=lambda: now[0],
        )
        await canary.tick()  # the start: half the nodes assigned
        assert sorted(await registry.assignments()) == canary.nodes and len(canary.nodes) == 2
        for name in canary.nodes:
            hub.nodes[name].policy_version = 1
        for step in range(40):
            now[0] = step * 0.25
            for name, live in hub.nodes.items():
                canary.observe(live, 0.0)  # the decisions look fine
                canary.observe_outcome(name, 2.5 if name in canary.nodes else 0.3)
            await canary.tick()
            if canary.state != "canary":
                break
        assert canary.state == "rolled_back", canary.describe()
        described = canary.describe()
        assert described["events"][-1]["reason"].startswith("outcomes against SLA: canary score")
        assert described["outcome_scores"]["canary"] > 0.5 >= described["outcome_scores"]["control"]
        assert (await registry.get(1)).state == "rolled_back" and await registry.assignments() == {}
    finally:
        await store.close()
