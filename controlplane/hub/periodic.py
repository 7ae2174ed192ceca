"""A background pass run every few seconds (the descheduler, the policy distributor)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from edgeplane_contract.aio import wait_set

__all__ = ["run_periodically"]


async def run_periodically(
    step: Callable[[], Awaitable[Any]],
    *,
    every_s: float,
    what: str,
    log: logging.Logger,
    wake: asyncio.Event | None = None,
) -> None:
    """``step()`` every ``every_s`` (at once when ``wake`` is set) until cancelled. A pass that
    fails (the store away, a connection closing) is logged and the next one tries again."""
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s pass failed: %s", what, exc)
        if wake is None:
            await asyncio.sleep(every_s)
        else:
            await wait_set(wake, every_s)
            wake.clear()
