"""Loops stop when asked: a cancel that arrives as the loop's wait completes is never lost."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from edgeplane_contract.aio import stop_task, wait_set


async def _loop_on(event: asyncio.Event) -> None:
    while True:  # the hub's reconcile loop and the agent's back-off, in small
        await wait_set(event, 30.0)
        event.clear()


@pytest.mark.parametrize("yields", range(5))
async def test_a_loop_waiting_with_wait_set_stops_when_cancelled_as_its_event_fires(yields):
    # With ``asyncio.wait_for(event.wait(), 30)`` in the loop this cancel is swallowed on
    # Python 3.11 for every ordering tried here up to 2 yields, and the task runs on.
    event = asyncio.Event()
    task = asyncio.create_task(_loop_on(event))
    await asyncio.sleep(0.01)
    event.set()
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1.0)
    assert task in done and task.cancelled()


async def test_wait_set_answers_whether_the_event_was_set():
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 1.0) is True
    assert await wait_set(event, 0.0) is True  # already set: no wait at all


async def test_stop_task_cancels_again_a_task_that_swallowed_the_first_cancel():
    cancels = 0

    async def stubborn() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancels += 1
                if cancels >= 2:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await stop_task(task, within_s=5.0, recancel_s=0.1) is True
    assert task.cancelled() and cancels == 2


async def test_stop_task_gives_up_after_its_bound_instead_of_hanging(caplog):
    released = asyncio.Event()

    async def immortal() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)

    task = asyncio.create_task(immortal(), name="immortal")
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    begin = loop.time()
    assert await stop_task(task, within_s=0.3, recancel_s=0.1) is False
    assert loop.time() - begin < 1.0
    assert "immortal did not stop" in caplog.text
    released.set()
    assert await stop_task(task) is True  # now it ends: no task left behind


async def test_stop_task_retrieves_the_exception_of_a_task_that_failed():
    async def fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    assert await stop_task(task) is True
    assert await stop_task(None) is True
