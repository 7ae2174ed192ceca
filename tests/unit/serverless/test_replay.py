"""A starting hub rebuilds what the keep-alive policy learned from the invocations in the store
(controlplane/serverless/replay.py), on a real SQLite store: the same windows, histograms and
headroom as a hub that saw the arrivals live, on a clock with another origin."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

from sqlalchemy import insert

from controlplane.serverless.keepalive import Policy, make_policy
from controlplane.serverless.replay import replay_in_slices, stored_arrivals
from controlplane.store.db import sqlite_url
from controlplane.store.models import InvocationRow
from controlplane.store.store import Store

HOUR = 3600.0


def _arrivals(seed: int) -> list[tuple[str, float, float]]:
    """(function, seconds before now, run time): ``tick`` every 5 min with jitter over 6 h,
    ``burst`` in overlapping bunches every 40 min, ``rare`` a few times (past the histogram)."""
    rng = random.Random(seed)
    out = [("tick", t + rng.uniform(-20, 20), 0.3) for t in range(60, int(6 * HOUR), 300)]
    for start in range(600, int(6 * HOUR), 2400):
        out += [("burst", start + i * 0.4, 2.0) for i in range(rng.randint(3, 8))]
    out += [("rare", t, 0.1) for t in (100.0, 5 * HOUR, 5.9 * HOUR)]
    return sorted(out, key=lambda a: a[1])


def _live(arrivals: list[tuple[str, float, float]], clock_origin: float) -> Policy:
    """What a hub that saw them live learned (the in-flight count as the live path counts it)."""
    policy = make_policy("edgeplane")
    ends: dict[str, list[float]] = {}
    for function, t, run in arrivals:
        now = clock_origin + t
        running = [e for e in ends.get(function, []) if e > now]
        policy.observe_invocation(function, now, run, concurrency=1 + len(running))
        ends[function] = [*running, now + run]
    return policy


async def test_replay_from_the_store_learns_what_the_live_hub_learned(tmp_path: Path) -> None:
    arrivals = _arrivals(seed=5)
    span = 6 * HOUR + 60
    wall_now = time.time()
    wall_start = wall_now - span
    store = await Store.open(sqlite_url(tmp_path / "db.sqlite3"))
    try:
        async with store.session() as s:
            await s.execute(
                insert(InvocationRow),
                [
                    {
                        "id": uuid.uuid4().hex, "function": f, "version": 1, "status": "Succeeded",
                        "created_at": wall_start + t, "finished_at": wall_start + t + run + 0.05,
                        "timings": {"exec_ms": run * 1000}, "event": {}, "result": {}, "error": {},
                    }
                    for f, t, run in arrivals
                ],
            )  # fmt: skip
            await s.commit()
        async with store.session() as s:
            stored = await stored_arrivals(s, since=wall_start - 1, before=wall_now, limit=100_000)
            newest = await stored_arrivals(s, since=wall_start - 1, before=wall_now, limit=10)
            paged = await stored_arrivals(s, since=wall_start - 1, before=wall_now, limit=100_000, page=7)
            paged_newest = await stored_arrivals(s, since=wall_start - 1, before=wall_now, limit=10, page=3)
    finally:
        await store.close()
    assert [a.function for a in stored] == [f for f, _, _ in arrivals]
    latest = sorted(a.created_at for a in stored)[-10:]
    assert [a.created_at for a in newest] == latest  # the latest, in order
    assert paged == stored and paged_newest == newest  # read a page at a time, the same rows

    live = _live(arrivals, clock_origin=1000.0)  # the old hub's loop clock
    replayed = make_policy("edgeplane")
    clock_now = 50.0  # the new hub's loop clock: another origin (a new process, another machine)
    count = await replay_in_slices(replayed, stored, wall_now=wall_now, clock_now=clock_now, slice_size=7)
    assert (count.arrivals, count.functions) == (len(arrivals), 3)

    shift = (clock_now - span) - 1000.0  # the same moment on the two clocks
    for function in ("tick", "burst", "rare"):
        live_hist = live.keepalive.hybrid.histogram(function)  # type: ignore[attr-defined]
        new_hist = replayed.keepalive.hybrid.histogram(function)  # type: ignore[attr-defined]
        assert (new_hist.counts, new_hist.n_oob) == (live_hist.counts, live_hist.n_oob), function
        at = 1000.0 + span
        assert replayed.keepalive.release_window(function, at + shift) == live.keepalive.release_window(
            function, at
        )
        assert live.headroom is not None and replayed.headroom is not None
        assert replayed.headroom.overlap_probability(function) == live.headroom.overlap_probability(function)
    # What was learned is not the fallback: tick's window comes from its histogram.
    assert replayed.keepalive.hybrid.window_source("tick", clock_now) == "histogram"  # type: ignore[attr-defined]
    assert make_policy("edgeplane").keepalive.hybrid.window_source("tick", clock_now) == "fallback"  # type: ignore[attr-defined]
