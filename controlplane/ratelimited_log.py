"""Log lines at a bounded rate per key, with a summary of what was held back.

A flood of the same complaint (one agent key sending thousands of malformed messages, a store
that refuses every write) must not flood the log: the first occurrence of a key is written at
once; the ones that follow within ``interval_s`` are held back and written as one summary line
when the interval ends (``%(count)d`` of them, with the last one's values). So a key writes at
most one line per interval, and a burst that stops is still summed up. Counting every
occurrence is the caller's job (a metric, a counter); this only decides what reaches the log.

The clock and the timer are injected (``clock``, ``schedule``) so tests drive them by hand; by
default a running asyncio loop's ``call_later`` writes a summary on time, and without a loop
it is written with the next occurrence after the interval (or by :meth:`RateLimitedLog.flush`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RateLimitedLog", "Schedule"]

# ``schedule(delay_s, callback)``: run ``callback`` in about ``delay_s`` seconds.
Schedule = Callable[[float, Callable[[], None]], object]


def _loop_schedule(delay_s: float, callback: Callable[[], None]) -> object:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop here: the summary waits for the next occurrence or flush()
        return None
    return loop.call_later(delay_s, callback)


@dataclass(slots=True)
class _Window:
    logged_at: float  # when a line was last written for this key
    summary: str = ""
    held: int = 0  # occurrences since then that were not written
    values: dict[str, Any] = field(default_factory=dict)  # the last held one's
    generation: int = 0  # a timer acts only for the window it was set for


class RateLimitedLog:
    """At most one line per key per ``interval_s`` written to ``logger``.

    ``max_keys`` bounds what a caller that invents keys (node names from an attacker) makes it
    hold: when full, the oldest key is forgotten (its held summary is written first).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 10.0,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule = _loop_schedule,
        max_keys: int = 4096,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.level = level
        self._clock = clock
        self._schedule = schedule
        self._max_keys = max_keys
        self._windows: dict[Hashable, _Window] = {}

    def log(self, key: Hashable, first: str, summary: str, **values: Any) -> bool:
        """One occurrence of ``key``; True when its line was written now.

        ``first`` is the line of an occurrence written as it is, ``summary`` the line for those
        held back; both are ``%``-templates over ``values`` (never put data into the template
        itself), and ``summary`` gets ``count`` and ``interval`` (seconds) as well.
        """
        now = self._clock()
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self._max_keys:
                self._forget(next(iter(self._windows)))
            self._windows[key] = _Window(logged_at=now)
            self.logger.log(self.level, first, values, stacklevel=2)
            return True
        if now - window.logged_at < self.interval_s:
            window.held += 1
            window.summary, window.values = summary, values
            if window.held == 1:
                generation = window.generation
                delay = window.logged_at + self.interval_s - now
                self._schedule(delay, lambda: self._due(key, generation))
            return False
        if window.held:  # the timer did not come (no loop, or a busy one): sum up with this one
            window.summary, window.values = summary, values
            window.held += 1
            self._write_summary(window, now)
        else:  # quiet for a whole interval: this one is written as it is
            window.logged_at, window.generation = now, window.generation + 1
            self.logger.log(self.level, first, values, stacklevel=2)
        return True

    def flush(self) -> int:
        """Write every summary still held (at shutdown); the number of lines written."""
        now = self._clock()
        held = [w for w in self._windows.values() if w.held]
        for window in held:
            self._write_summary(window, now)
        return len(held)

    def _due(self, key: Hashable, generation: int) -> None:
        window = self._windows.get(key)
        if window is not None and window.generation == generation and window.held:
            self._write_summary(window, self._clock())

    def _write_summary(self, window: _Window, now: float) -> None:
        values = {**window.values, "count": window.held, "interval": f"{self.interval_s:g}"}
        self.logger.log(self.level, window.summary, values)
        window.logged_at, window.held, window.generation = now, 0, window.generation + 1

    def _forget(self, key: Hashable) -> None:
        window = self._windows.pop(key)
        if window.held:
            self._write_summary(window, self._clock())
