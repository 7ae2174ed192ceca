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


async def test_a_token_row_read_once_is_kept_until_a_revocation_marks_the_store(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct read itself is skipped while the row is kept: a stat of the revocation mark
    stands in for it; a revocation elsewhere replaces the mark and the next request reads again."""
    hub, cli = stores
    identities = IdentityStore(hub)
    kept = await identities.create_api_token("kept", ["read"])
    other = await identities.create_api_token("other", ["read"])
    for token in (kept.token, kept.token, other.token, other.token):  # stamped, then read and kept
        assert await identities.authenticate(token) is not None
    lookup = identities._lookup
    assert lookup is not None
    reads = []
    monkeypatch.setattr(identities, "_lookup", _Counting(lookup, reads))
    assert await identities.authenticate(kept.token) is not None
    assert reads == [], "a kept row was read again"
    assert await IdentityStore(cli).revoke_api_token("kept") == 1
    assert await identities.authenticate(kept.token) is None
    assert await identities.authenticate(other.token) is not None  # read anew, still valid
    assert len(reads) == 2


class _Counting:
    """A read-only connection that counts the statements it runs."""

    def __init__(self, inner: object, reads: list[str]) -> None:
        self._inner = inner
        self._reads = reads

    def execute(self, sql: str, parameters: object) -> object:
        self._reads.append(sql)
        return self._inner.execute(sql, parameters)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._inner.close()  # type: ignore[attr-defined]
