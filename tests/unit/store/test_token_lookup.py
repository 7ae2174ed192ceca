"""API token lookups on a SQLite store: a direct primary-key read per request, not an engine
session, with a revocation by another store (another process: ``controlplane token revoke``)
refused from the next request on."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controlplane.store.identities import IdentityStore
from controlplane.store.store import Store


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    url = f"sqlite:///{tmp_path / 'edgeplane.sqlite3'}"
    hub = await Store.open(url)
    cli = await Store.open(url, run_migrations=False)
    try:
        yield hub, cli
    finally:
        await cli.close()
        await hub.close()


async def test_a_recently_used_token_is_checked_without_an_engine_session(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, _ = stores
    identities = IdentityStore(hub)
    new = await identities.create_api_token("bench", ["functions", "read"])
    first = await identities.authenticate(new.token)  # stamps last_used_at (through the engine)
    assert first is not None and first.scopes == frozenset({"functions", "read"})

    def no_session() -> None:
        raise AssertionError("an engine session for a token lookup")

    monkeypatch.setattr(hub, "session", no_session)
    again = await identities.authenticate(new.token)
    assert again == first
    assert await identities.authenticate(new.token[:-1] + ("x" if new.token[-1] != "x" else "y")) is None


async def test_a_revocation_by_another_process_counts_from_the_next_request(
    stores: tuple[Store, Store],
) -> None:
    hub, cli = stores
    identities = IdentityStore(hub)
    new = await identities.create_api_token("laptop", ["read"])
    assert await identities.authenticate(new.token) is not None
    assert await identities.authenticate(new.token) is not None
    assert await IdentityStore(cli).revoke_api_token("laptop") == 1
    assert await identities.authenticate(new.token) is None


async def test_an_expired_token_is_refused_on_the_direct_read(stores: tuple[Store, Store]) -> None:
    hub, _ = stores
    identities = IdentityStore(hub)
    new = await identities.create_api_token("ci", ["read"], ttl_s=0.3)
    assert await identities.authenticate(new.token) is not None
    time.sleep(0.4)
    assert await identities.authenticate(new.token) is None
