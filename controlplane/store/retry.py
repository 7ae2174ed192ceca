"""Retrying a store transaction while the store is away (tenacity, exponential back-off, bounded).

Only errors that mean the store is unavailable (:func:`~controlplane.store.availability.is_unavailable`,
or the :class:`~controlplane.errors.StoreUnavailableError` the store turns them into) are retried:
a constraint violation or a bug fails at once. The operation must be safe to run again: a commit
whose acknowledgement was lost with the connection may have happened (write it idempotently).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from controlplane.errors import StoreUnavailableError
from controlplane.store.availability import is_unavailable

__all__ = ["retry_store", "store_unavailable"]

T = TypeVar("T")


def store_unavailable(exc: BaseException) -> bool:
    """True for an error worth retrying: the store is away or cannot write now."""
    return isinstance(exc, StoreUnavailableError) or is_unavailable(exc)


async def retry_store(
    operation: Callable[[], Awaitable[T]],
    *,
    within_s: float,
    first_wait_s: float = 0.1,
    max_wait_s: float = 2.0,
) -> T:
    """Run ``operation`` until it succeeds, retrying store outages with exponential back-off
    (``first_wait_s`` doubling up to ``max_wait_s``) for at most ``within_s`` seconds; then the
    last error is raised."""
    result: T | None = None
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(store_unavailable),
        wait=wait_exponential(multiplier=first_wait_s, max=max_wait_s),
        stop=stop_after_delay(within_s),
        reraise=True,
    ):
        with attempt:
            result = await operation()
    return result  # type: ignore[return-value]  # set by the attempt that succeeded
