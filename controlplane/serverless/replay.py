"""What the keep-alive policy learned, rebuilt from the store when a hub starts.

The policy (idle-time histograms, the headroom predictor, the call graph) learns from arrivals
and lives in the leading hub's memory. A restarted hub, or a standby that takes over, would start
it empty: every function back on the fallback window, cold starts until it has learned again. The
store keeps every invocation for ``invocation_retention_s`` (``history.py`` writes the synchronous
ones behind), so a starting hub feeds the policy the latest ``replay_arrivals`` of them in the
order they came, with what the live path gives it: the arrival time (on the event loop's clock:
the policy measures gaps, and the live path passes ``loop.time()``), the run time (the record's
``exec_ms``, else its wall time) and how many of the function's invocations were running then. The
pre-warm names it returns are not acted on: those moments are past.

It costs about 25 µs an arrival and the read 13-19 µs a row (the default 50,000: about two
seconds on the machine of docs/benchmarks.md), too long to hold a takeover up: the hub serves at
once with the empty policy, replays into a copy of it in slices that yield to the loop
(:func:`replay_in_slices`), then feeds the copy the live arrivals of the meantime and puts it in
place (``FunctionService``).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.serverless.keepalive import Policy
from controlplane.store.models import InvocationRow

__all__ = ["Arrival", "ReplayCount", "replay_in_slices", "stored_arrivals"]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One stored invocation as the policy saw it arrive (wall-clock seconds)."""

    function: str
    created_at: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class ReplayCount:
    arrivals: int
    functions: int


async def stored_arrivals(
    s: AsyncSession, *, since: float, before: float, limit: int, page: int = 2000
) -> list[Arrival]:
    """The latest ``limit`` invocations created in [``since``, ``before``), oldest first; read
    newest first, ``page`` rows a statement, so that the loop runs between pages."""
    rows: list[Any] = []
    after: tuple[float, str] | None = None  # the last row read: the next page is older
    while len(rows) < limit:
        query = select(
            InvocationRow.id,
            InvocationRow.function,
            InvocationRow.created_at,
            InvocationRow.finished_at,
            InvocationRow.timings,
        ).where(InvocationRow.created_at >= since, InvocationRow.created_at < before)
        if after is not None:
            query = query.where(
                or_(
                    InvocationRow.created_at < after[0],
                    and_(InvocationRow.created_at == after[0], InvocationRow.id < after[1]),
                )
            )
        batch = (
            await s.execute(
                query.order_by(InvocationRow.created_at.desc(), InvocationRow.id.desc()).limit(
                    min(page, limit - len(rows))
                )
            )
        ).all()
        rows.extend(batch)
        if len(batch) < page:
            break
        after = (batch[-1].created_at, batch[-1].id)
    arrivals = []
    for _, function, created_at, finished_at, timings in reversed(rows):
        exec_ms = timings.get("exec_ms") if isinstance(timings, dict) else None
        if isinstance(exec_ms, (int, float)) and math.isfinite(exec_ms) and exec_ms > 0:
            duration = exec_ms / 1000.0
        elif finished_at is not None and finished_at >= created_at:
            duration = finished_at - created_at
        else:
            duration = 0.0  # still queued or running: its start is what the policy needs
        arrivals.append(Arrival(function, created_at, duration))
    return arrivals


async def replay_in_slices(
    policy: Policy, arrivals: Sequence[Arrival], *, wall_now: float, clock_now: float, slice_size: int = 250
) -> ReplayCount:
    """Feed ``arrivals`` (oldest first) to ``policy`` as the live path would have, wall times
    made times on the clock whose present is ``clock_now``; yields to the event loop after every
    ``slice_size`` arrivals."""
    offset = clock_now - wall_now
    running: dict[str, list[float]] = {}  # function -> end times of its invocations, a heap
    for start in range(0, len(arrivals), slice_size):
        for arrival in arrivals[start : start + slice_size]:
            t = arrival.created_at + offset
            ends = running.setdefault(arrival.function, [])
            while ends and ends[0] <= t:
                heapq.heappop(ends)
            policy.observe_invocation(arrival.function, t, arrival.duration_s, concurrency=1 + len(ends))
            heapq.heappush(ends, t + arrival.duration_s)
        await asyncio.sleep(0)
    return ReplayCount(arrivals=len(arrivals), functions=len(running))
