"""The schema comes only from alembic migrations: up from empty, down to nothing, up again."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import inspect, text

from controlplane.store.db import create_engine, current_revision, downgrade, head_revision, migrate
from controlplane.store.models import Base

TABLES = {
    "clusters",
    "nodes",
    "workloads",
    "placements",
    "events",
    "functions",
    "invocations",
    "api_tokens",
    "join_tokens",
    "node_credentials",
    "runtime_observations",
}


async def _tables(engine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


async def _roundtrip(url: str) -> None:
    engine = create_engine(url)
    try:
        assert await current_revision(engine) is None
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        assert TABLES <= await _tables(engine)
        # The migrated schema matches the ORM models column for column.
        async with engine.connect() as conn:
            for table in Base.metadata.sorted_tables:
                columns = await conn.run_sync(
                    lambda c, t=table.name: {col["name"] for col in inspect(c).get_columns(t)}
                )
                assert columns == {c.name for c in table.columns}, table.name
        await migrate(engine)  # idempotent
        await downgrade(engine, "base")
        assert not TABLES & await _tables(engine)
        await migrate(engine)
        assert TABLES <= await _tables(engine)
    finally:
        await engine.dispose()


async def test_sqlite_migrates_up_from_empty_and_back(sqlite_url):
    await _roundtrip(sqlite_url)


@pytest.mark.postgres
async def test_postgresql_migrates_up_from_empty_and_back(postgres_url):
    await _roundtrip(postgres_url)


async def _placement_columns(engine) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: {col["name"] for col in inspect(c).get_columns("placements")})


async def _restarts_roundtrip(url: str) -> None:
    """0003 adds placements.restarts (0 for rows that existed) and its downgrade removes it, keeping rows."""
    engine = create_engine(url)
    try:
        await migrate(engine, "0002")
        assert "restarts" not in await _placement_columns(engine)
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO workloads (id, name, status, spec, replicas, priority, cancel_requested,"
                    " message, created_at, updated_at) VALUES ('w1', 'old', 'Running', '{}', 1, 0, false,"
                    " '', 1.0, 1.0)"
                )
            )
            await conn.execute(
                text(
                    "INSERT INTO placements (id, workload_id, replica, attempt, node, cluster, status,"
                    " command_id, acked, stop_acked, message, assignment, explanation, scheduled_at,"
                    " updated_at) VALUES ('p1', 'w1', 0, 1, 'n1', 'default', 'Running', 'c1', true, false,"
                    " '', '{}', '{}', 1.0, 1.0)"
                )
            )
        await migrate(engine)
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT restarts FROM placements WHERE id = 'p1'"))).scalar() == 0
        await downgrade(engine, "0002")
        assert "restarts" not in await _placement_columns(engine)
        async with engine.connect() as conn:
            assert (
                await conn.execute(text("SELECT status FROM placements WHERE id = 'p1'"))
            ).scalar() == "Running"
        await migrate(engine)
        assert "restarts" in await _placement_columns(engine)
    finally:
        await engine.dispose()


async def test_sqlite_placement_restarts_column_upgrades_and_downgrades(sqlite_url):
    await _restarts_roundtrip(sqlite_url)


@pytest.mark.postgres
async def test_postgresql_placement_restarts_column_upgrades_and_downgrades(postgres_url):
    await _restarts_roundtrip(postgres_url)


@pytest.mark.postgres
async def test_the_hub_runs_a_workload_on_postgresql(nats_server, postgres_url, tmp_path):
    from harness import running_agents, running_hub

    async with (
        running_hub(nats_server.url, postgres_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["pg1"]),
    ):
        workload_id = await api.post_workload({"name": "on-postgres", "command": ["true"]})
        done = await api.wait_status(workload_id, "Succeeded", "Failed")
        assert (done["status"], done["node"]) == ("Succeeded", "pg1")


@pytest.mark.postgres
async def test_replicas_starting_at_once_migrate_one_after_the_other(postgres_url):
    """Three hubs (or their init containers) migrating one fresh database at the same moment: the
    first upgrades under the advisory lock, the others find the schema at head; none fails."""
    engines = [create_engine(postgres_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(migrate(e) for e in engines), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert await current_revision(engines[0]) == head_revision()
        assert TABLES <= await _tables(engines[0])
    finally:
        for engine in engines:
            await engine.dispose()


@pytest.mark.postgres
async def test_a_leader_holding_the_hub_lease_migrates_at_its_start(postgres_url):
    """``serve`` takes the hub lease (a session advisory lock) and then opens the store, which
    migrates under the migration lock: with one key for both it waited on itself for ever (found
    by bench/failover.py, whose first hub never started)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    from controlplane.coordination.hub_lease import LEASE_KEY

    lease = await asyncpg.connect(make_url(postgres_url).set(drivername="postgresql").render_as_string(False))
    engine = create_engine(postgres_url)
    try:
        assert await lease.fetchval("SELECT pg_try_advisory_lock($1)", LEASE_KEY)
        await asyncio.wait_for(migrate(engine), timeout=30)
        assert await current_revision(engine) == head_revision()
    finally:
        await engine.dispose()
        await lease.close()
