"""Which errors mean "the store is away" (retried, answered 503), and the retry's bounds."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time

import asyncpg
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from edgeplane_contract.aio import log_failure

from controlplane.errors import StoreUnavailableError
from controlplane.store.availability import WriteHealth, from_database, is_unavailable, short_reason
from controlplane.store.retry import retry_store


def _wrapped(orig: BaseException, *, invalidated: bool = False) -> OperationalError:
    return OperationalError(
        "INSERT INTO workloads ...", {"env": "secret"}, orig, connection_invalidated=invalidated
    )


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        (_wrapped(sqlite3.OperationalError("database or disk is full")), True),
        (_wrapped(sqlite3.OperationalError("database is locked")), True),
        (_wrapped(sqlite3.OperationalError("disk I/O error")), True),
        (_wrapped(sqlite3.OperationalError("attempt to write a readonly database")), True),
        (_wrapped(sqlite3.OperationalError("no such table: workloads")), False),
        (_wrapped(ValueError("anything"), invalidated=True), True),
        (ConnectionRefusedError(111, "Connect call failed"), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), True),
        (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), True),
        (asyncpg.exceptions.DiskFullError("could not extend file"), True),
        (asyncpg.exceptions.UniqueViolationError("duplicate key"), False),
        (IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")), False),
        (StoreUnavailableError("x"), False),  # already mapped: the retry checks its type
        (ValueError("a bug"), False),
    ],
)
def test_only_errors_of_a_store_that_is_away_or_cannot_write_count_as_unavailable(error, unavailable):
    assert is_unavailable(error) is unavailable


def test_an_error_raised_from_a_lost_connection_is_found_through_its_cause():
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as exc:
            raise RuntimeError("while committing") from exc
    except RuntimeError as outer:
        assert is_unavailable(outer)


def test_the_reason_names_the_cause_and_never_the_statement_or_its_parameters():
    reason = short_reason(_wrapped(sqlite3.OperationalError("database or disk is full")))
    assert reason == "OperationalError: database or disk is full"
    assert "secret" not in reason and "INSERT" not in reason


def test_an_os_error_of_another_part_is_not_taken_for_the_database():
    assert not from_database(FileNotFoundError("console.css"))
    assert from_database(_wrapped(sqlite3.OperationalError("database is locked")))
    assert from_database(asyncpg.exceptions.ConnectionDoesNotExistError("closed"))


def test_write_health_fails_on_a_failed_write_and_clears_on_a_successful_one():
    health = WriteHealth()
    assert not health.failing
    health.failed(_wrapped(sqlite3.OperationalError("database or disk is full")))
    assert health.failing and "full" in health.reason
    health.succeeded()
    assert not health.failing and health.reason == "" and health.succeeded_at is not None


async def test_a_store_outage_is_retried_with_backoff_until_it_ends():
    calls: list[float] = []

    async def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise StoreUnavailableError("ConnectionRefusedError: refused")
        return "stored"

    assert await retry_store(flaky, within_s=5.0, first_wait_s=0.05) == "stored"
    assert len(calls) == 3 and calls[2] - calls[1] > calls[1] - calls[0]  # backing off


async def test_the_retry_gives_up_after_its_bound_with_the_last_error():
    started = time.monotonic()

    async def away() -> None:
        raise StoreUnavailableError("ConnectionRefusedError: refused")

    with pytest.raises(StoreUnavailableError):
        await retry_store(away, within_s=0.3, first_wait_s=0.05, max_wait_s=0.1)
    assert time.monotonic() - started < 2.0


async def test_an_error_that_is_not_an_outage_is_not_retried():
    calls = 0

    async def wrong() -> None:
        nonlocal calls
        calls += 1
        raise IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))

    with pytest.raises(IntegrityError):
        await retry_store(wrong, within_s=5.0)
    assert calls == 1


async def test_a_background_task_that_fails_is_logged_once_per_interval_not_dropped(caplog):
    async def broken() -> None:
        raise ConnectionRefusedError(111, "refused")

    caplog.set_level(logging.ERROR, "edgeplane.aio")
    for _ in range(3):
        task = asyncio.create_task(broken())
        task.add_done_callback(log_failure)
        await asyncio.wait({task})
        await asyncio.sleep(0)  # the done-callbacks run
    lines = [r for r in caplog.records if "background task" in r.getMessage()]
    assert len(lines) == 1 and "broken" in lines[0].getMessage() and lines[0].exc_info is not None
