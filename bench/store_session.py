"""What a store session costs on each SQLite driver, against the bare ``sqlite3`` floor, in one run.

    python bench/store_session.py [--sessions 300] [--json out.json]

Opens the hub's store (migrated schema, the hub's pragmas) once with the default driver
(``sqlite://`` -> ``sqlite+inline``, ``controlplane/store/inline_sqlite.py``) and once with
``sqlite+aiosqlite://``, and times, in alternating blocks of 50, sessions that do what the hub's hot paths do:
``SELECT 1`` in a session, the reconcile round's pending-workloads read, the dispatcher's
unsent-placements read, and a one-row write (an event) with its commit. The floor is the same
``SELECT 1`` on a bare ``sqlite3`` connection. Prints p50/p99 per driver and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.store import queries
from controlplane.store.models import EventRow
from controlplane.store.store import Store

Step = Callable[[AsyncSession], Awaitable[Any]]
BLOCK = 50  # sessions of one step on one driver in a row
WARMUP = 5  # the first sessions of a block, not counted


async def _select_one(s: AsyncSession) -> Any:
    return await s.execute(select(1))


async def _pending(s: AsyncSession) -> Any:
    return await queries.pending_heads(s, limit=200)


async def _unsent(s: AsyncSession) -> Any:
    return await queries.unsent_placements(s)


async def _write(s: AsyncSession) -> Any:
    s.add(EventRow(ts=time.time(), kind="Bench", object_kind="bench", object_id=uuid.uuid4().hex[:16]))


STEPS: dict[str, Step] = {
    "select 1": _select_one,
    "pending workloads": _pending,
    "unsent placements": _unsent,
    "one-row write + commit": _write,
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=300, help="per step and driver")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    drivers = {"inline": "sqlite", "aiosqlite": "sqlite+aiosqlite"}
    samples: dict[str, dict[str, list[float]]] = {d: {step: [] for step in STEPS} for d in drivers}
    with tempfile.TemporaryDirectory(prefix="store-session-") as tmp:
        stores = {d: await Store.open(f"{scheme}:///{tmp}/{d}.sqlite3") for d, scheme in drivers.items()}
        try:
            # Alternating blocks, not alternating sessions: right after an aiosqlite call its
            # thread still wants the GIL, which would charge the inline driver's next session.
            for _ in range(max(1, args.sessions // BLOCK)):
                for driver, store in stores.items():
                    for step_name, step in STEPS.items():
                        for n in range(BLOCK + WARMUP):
                            began = time.perf_counter()
                            async with store.session() as s:
                                await step(s)
                            if n >= WARMUP:
                                samples[driver][step_name].append((time.perf_counter() - began) * 1000)
        finally:
            for store in stores.values():
                await store.close()
        bare = sqlite3.connect(f"{tmp}/inline.sqlite3")
        floor_samples = []
        for _ in range(args.sessions):
            began = time.perf_counter()
            bare.execute("SELECT 1").fetchall()
            floor_samples.append((time.perf_counter() - began) * 1000)
        bare.close()
    floor = statistics.median(floor_samples)
    print(
        f"store sessions, {args.sessions} per step and driver, alternating blocks; "
        f"floor: bare sqlite3 SELECT 1 p50 {floor:.4f} ms"
    )
    print(
        "| step | aiosqlite p50 (ms) | inline p50 (ms) | inline p99 (ms) | inline/aiosqlite | inline/floor |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    summary: dict[str, Any] = {"floor_ms": floor, "steps": {}}
    for step_name in STEPS:
        old = statistics.median(samples["aiosqlite"][step_name])
        new = statistics.median(samples["inline"][step_name])
        p99 = _pct(samples["inline"][step_name], 0.99)
        print(f"| {step_name} | {old:.3f} | {new:.3f} | {p99:.3f} | {new / old:.2f}x | {new / floor:.0f}x |")
        summary["steps"][step_name] = {"aiosqlite_p50_ms": old, "inline_p50_ms": new, "inline_p99_ms": p99}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
