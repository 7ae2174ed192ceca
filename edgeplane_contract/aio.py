"""Two asyncio helpers that stop loops for sure, on the hub and the agent alike.

Python 3.11's ``asyncio.wait_for`` runs its awaitable in an inner task; a cancellation that arrives
just as that inner wait completes is swallowed (CPython gh-86296, fixed in 3.12), and a periodic
loop that sleeps with ``wait_for(event.wait(), timeout)`` then never ends: a hub whose stop awaited
its reconcile loop hung for good under load. ``wait_set`` waits in the caller's own task
(``asyncio.timeout``), so a cancel always lands; ``stop_task`` cancels again if one was swallowed
anyway, and gives up (logged) after a bound instead of hanging its caller. ``log_failure`` is the
done-callback of tasks nobody awaits: their exceptions are logged, never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

log = logging.getLogger("edgeplane.aio")

# A task that ignored a cancellation is cancelled again this often: long enough for the cleanup a
# cancellation starts (a store rollback under load) to finish before it could be cut short.
_RECANCEL_S = 5.0


async def wait_set(event: asyncio.Event, within_s: float) -> bool:
    """Wait until ``event`` is set, at most ``within_s``; True when it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, within_s)):
            await event.wait()
    return event.is_set()


async def stop_task(
    task: asyncio.Task[Any] | None, *, within_s: float = 10.0, recancel_s: float = _RECANCEL_S
) -> bool:
    """Cancel ``task`` and wait until it has ended; True when it did within ``within_s``.

    A task that swallowed the cancellation is cancelled again; its exception, if any, is
    retrieved (and dropped: a stopping caller has nothing left to do with it)."""
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not task.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            log.warning("task %s did not stop within %.0fs of its cancellation", task.get_name(), within_s)
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(recancel_s, remaining))
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()
    return True


# A background task's failure is logged with its traceback at most this often per task name; the
# ones in between are counted into the next line (a failing loop must not flood the log).
_FAILURE_LOG_EVERY_S = 60.0
_failures_logged: dict[str, tuple[float, int]] = {}


def log_failure(task: asyncio.Task[Any]) -> None:
    """A done-callback for a task nobody awaits: its exception is logged (rate-limited per task
    name) instead of "Task exception was never retrieved" at garbage collection, or nothing."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        return
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", None) or task.get_name()
    now = time.monotonic()
    last, skipped = _failures_logged.get(name, (float("-inf"), 0))
    if now - last < _FAILURE_LOG_EVERY_S:
        _failures_logged[name] = (last, skipped + 1)
        return
    _failures_logged[name] = (now, 0)
    more = f" ({skipped} more failure(s) of it since the last line)" if skipped else ""
    log.error("background task %s failed%s", name, more, exc_info=exc)
