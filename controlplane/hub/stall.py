"""The hub's own stalls: how long its event loop went without running.

A hub that is frozen (``SIGSTOP``, a paused VM, a blocking call) hears no heartbeat while it is
stopped; on waking, every node looks silent although the silence was the hub's own. A small task
sleeps ``period_s`` at a time and measures how late it wakes (the loop's lag); the lease checker
asks :meth:`LoopWatch.take` before it judges the nodes and gives them a fresh lease after a long
stall (``hub.leases.stall_extends``), as it does after a NATS reconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["LoopWatch"]


class LoopWatch:
    """Measures the event loop's stalls; ``clock`` is the loop's time (what leases count in)."""

    def __init__(self, *, period_s: float = 0.1, clock: Callable[[], float] | None = None) -> None:
        self.period_s = period_s
        self._clock = clock
        self._last_beat: float | None = None
        self._worst = 0.0  # the longest stall seen since the last take()
        self._worst_end = 0.0

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def beat(self) -> None:
        """One tick of the watch: a lag beyond the period is a stall that ended now."""
        now = self._now()
        if self._last_beat is not None:
            self._note(now - self._last_beat - self.period_s, now)
        self._last_beat = now

    def _note(self, lag: float, end: float) -> None:
        if lag > self._worst:
            self._worst, self._worst_end = lag, end

    def take(self) -> tuple[float, float]:
        """(the longest stall since the last take, when it ended), then forget it; a stall still
        unseen by the watch (its tick not run yet after the loop woke) counts, ending now."""
        now = self._now()
        if self._last_beat is not None and now - self._last_beat > self.period_s:
            self._note(now - self._last_beat - self.period_s, now)
            self._last_beat = now  # counted here: the watch's late tick must not count it again
        found = (self._worst, self._worst_end)
        self._worst, self._worst_end = 0.0, 0.0
        return found

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            self.beat()
            await asyncio.sleep(self.period_s)
