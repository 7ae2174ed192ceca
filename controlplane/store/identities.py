"""Identity records: API tokens, agent join tokens and node NATS credentials.

Only hashes of tokens and public keys are stored. Every method is one short transaction on the
``Store``'s engine, so the CLI (``controlplane token ...``) and a running hub can share a database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.auth.tokens import Principal, hash_token, new_token, token_id, tokens_equal
from controlplane.store.models import ApiTokenRow, JoinTokenRow, NodeCredentialRow
from controlplane.store.store import Store

__all__ = [
    "IdentityStore",
    "JoinRefused",
    "JoinTokenBound",
    "NewToken",
    "NodeAlreadyEnrolled",
    "NotEnrolled",
]

log = logging.getLogger("edgeplane.store.identities")

# A token in use is stamped at most this often (a write per request would be wasteful).
_TOUCH_EVERY_S = 60.0
# The token lookup's read-only SQLite connection waits this long for a lock (WAL readers rarely do).
_LOOKUP_BUSY_MS = 100
_LOOKUP_RETRY_S = 10.0
# A token row read on SQLite is kept this long at most (a backstop: revocations mark the store,
# below, and a marked store drops every kept row at the next request).
_ROW_KEPT_S = 5.0
_ROWS_KEPT = 1024
REVOKED_MARK = ".tokens-revoked"  # beside the SQLite file: replaced by every revocation
_TOKEN_ROW = (
    "SELECT token_hash, name, scopes, expires_at, revoked_at, last_used_at FROM api_tokens WHERE id = ?"
)


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just created: ``token`` is shown once, never stored."""

    id: str
    name: str
    token: str
    scopes: list[str]
    expires_at: float | None


class JoinRefused(Exception):
    """A join token that is unknown, expired, used, or for another cluster. ``field``: the part of
    the join that is wrong; ``token_id``: the token's public id once it is known to be valid (a
    refusal worth an event), else None."""

    field = "token"

    def __init__(self, message: str, *, token_id: str | None = None) -> None:
        super().__init__(message)
        self.token_id = token_id


class JoinTokenBound(JoinRefused):
    """A valid join token bound to another node name (it stays unused)."""

    field = "node"


class NodeAlreadyEnrolled(JoinRefused):
    """A join for a name with active credentials, without an admin's replace (the token stays
    unused and the live node's key untouched)."""

    field = "node"


class NotEnrolled(Exception):
    """An admin act on a node that has no credentials row at all."""


class IdentityStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        # The token lookup's own read-only connection (SQLite file stores only; see authenticate).
        self._lookup: sqlite3.Connection | None = None
        self._lookup_retry_at = 0.0  # after a failed read, the engine answers until then
        # Token rows read through it: id -> (read at, the revocation mark then, the row).
        self._rows: dict[str, tuple[float, object, tuple[Any, ...]]] = {}
        self._mark: str | None = None  # the revocation mark's path ("": the store has none)

    # --- API tokens -----------------------------------------------------------------------

    async def create_api_token(self, name: str, scopes: list[str], ttl_s: float | None = None) -> NewToken:
        ident, token = new_token("api")
        now = time.time()
        expires = now + ttl_s if ttl_s else None
        async with self.store.session() as session:
            session.add(
                ApiTokenRow(
                    id=ident,
                    name=name,
                    token_hash=hash_token(token),
                    scopes=sorted(scopes),
                    created_at=now,
                    expires_at=expires,
                )
            )
        return NewToken(id=ident, name=name, token=token, scopes=sorted(scopes), expires_at=expires)

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid, unexpired, unrevoked API token; None otherwise.

        A revocation (also one by ``controlplane token revoke`` in another process) counts from
        the next request on. On SQLite the row is read through a read-only connection of its own,
        on the calling thread, and kept while no revocation marked the store (``_read_token_row``):
        no session on the async engine (a thread hop, a transaction and the ORM per API request
        were most of a warm invocation's hub time); elsewhere every call reads it as committed."""
        ident = token_id(token, "api")
        if ident is None:
            return None
        now = time.time()
        row = self._read_token_row(ident)
        if row is not None:
            token_hash, name, scopes, expires_at, revoked_at, last_used_at = row
            if not tokens_equal(token, token_hash):
                return None
            if revoked_at is not None or (expires_at is not None and expires_at <= now):
                return None
            if last_used_at is not None and now - last_used_at <= _TOUCH_EVERY_S:
                return Principal(token_id=ident, name=name, scopes=scopes)
            # Due for its last-used stamp (once a minute): the write goes through the engine.
        async with self.store.session() as session:
            orm_row = await session.get(ApiTokenRow, ident)
            if orm_row is None or not tokens_equal(token, orm_row.token_hash):
                return None
            expired = orm_row.expires_at is not None and orm_row.expires_at <= now
            if orm_row.revoked_at is not None or expired:
                return None
            if orm_row.last_used_at is None or now - orm_row.last_used_at > _TOUCH_EVERY_S:
                orm_row.last_used_at = now
                self._rows.pop(ident, None)  # kept with the old stamp: read again after this
            return Principal(token_id=orm_row.id, name=orm_row.name, scopes=frozenset(orm_row.scopes))

    def _read_token_row(self, ident: str) -> tuple[Any, ...] | None:
        """The token's row read directly from a SQLite file store; None when there is no such row,
        the store is not a SQLite file, or the read failed (the caller then asks the engine, which
        also reports a store that is away).

        A row found is kept for the next requests (a ``stat`` of the revocation mark instead of a
        read: the read was 6.6% of the hub's loop under warm invocations) while the mark is the one
        it was read under and for at most ``_ROW_KEPT_S``; every revocation, by any process,
        replaces the mark (:meth:`revoke_api_token`), so it still counts from the next request."""
        db = self._lookup_db()
        if db is None:
            return None
        now = time.monotonic()
        mark = self._revocation_mark()
        kept = self._rows.get(ident)
        if kept is not None and kept[1] == mark and now - kept[0] <= _ROW_KEPT_S:
            return kept[2]
        try:
            row = db.execute(_TOKEN_ROW, (ident,)).fetchone()
        except (sqlite3.Error, ValueError, TypeError) as exc:
            log.debug("token lookup through the engine for a while (%s)", exc)
            self._close_lookup()
            self._lookup_retry_at = time.monotonic() + _LOOKUP_RETRY_S
            return None
        if row is None:
            self._rows.pop(ident, None)
            return None
        token_hash, name, scopes, *rest = row
        found = (token_hash, name, frozenset(json.loads(scopes)), *rest)  # parsed once, kept parsed
        if len(self._rows) >= _ROWS_KEPT:
            self._rows.clear()
        self._rows[ident] = (now, mark, found)  # the mark from before the read: a revocation after it shows
        return found

    def _mark_path(self) -> str | None:
        if self._mark is None:
            url = self.store.engine.url
            database = url.database
            sqlite_file = url.drivername.startswith("sqlite") and database and database != ":memory:"
            self._mark = database + REVOKED_MARK if sqlite_file and database else ""
        return self._mark or None

    def _revocation_mark(self) -> object:
        """Which revocation mark the store has now (its file's identity; None: none yet)."""
        path = self._mark_path()
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _mark_revocation(self) -> None:
        """Replace the revocation mark (a new file each time, so that its identity changes)."""
        self._rows.clear()
        path = self._mark_path()
        if path is None:
            return
        staged = f"{path}.{os.getpid()}.tmp"
        try:
            # 0600: the store's files are private
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as mark:
                mark.write(str(time.time_ns()))
            os.replace(staged, path)
        except OSError as exc:
            # The revocation is committed; hubs that keep the row learn of it within _ROW_KEPT_S.
            log.warning(
                "could not mark a token revocation at %s (%s): hubs see it within %gs", path, exc, _ROW_KEPT_S
            )
            with contextlib.suppress(OSError):
                os.unlink(staged)

    def _lookup_db(self) -> sqlite3.Connection | None:
        if self._lookup is not None or time.monotonic() < self._lookup_retry_at:
            return self._lookup
        url = self.store.engine.url
        database = url.database
        if not url.drivername.startswith("sqlite") or not database or database == ":memory:":
            self._lookup_retry_at = float("inf")  # not a SQLite file: always the engine
            return None
        try:
            # Read-only, autocommit: each SELECT sees the latest commit of any process (WAL).
            self._lookup = sqlite3.connect(
                f"file:{database}?mode=ro", uri=True, isolation_level=None, timeout=_LOOKUP_BUSY_MS / 1000
            )
        except sqlite3.Error as exc:
            log.debug("no direct token lookup on %s (%s)", database, exc)
            self._lookup_retry_at = time.monotonic() + _LOOKUP_RETRY_S
        return self._lookup

    def _close_lookup(self) -> None:
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None

    async def list_api_tokens(self) -> list[ApiTokenRow]:
        async with self.store.session() as session:
            rows = await session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.created_at))
            return list(rows)

    async def revoke_api_token(self, id_or_name: str) -> int:
        """Revoke by id, or every active token of that name; how many were revoked."""
        now = time.time()
        async with self.store.session() as session:
            result = await session.execute(
                update(ApiTokenRow)
                .where(
                    (ApiTokenRow.id == id_or_name) | (ApiTokenRow.name == id_or_name),
                    ApiTokenRow.revoked_at.is_(None),
                )
                .values(revoked_at=now)
            )
            revoked = int(result.rowcount or 0)  # type: ignore[attr-defined]
        if revoked:
            self._mark_revocation()  # committed first: a hub that sees the new mark reads the row anew
        return revoked

    # --- join tokens and node credentials -------------------------------------------------

    async def create_join_token(self, cluster: str, ttl_s: float, *, node: str | None = None) -> NewToken:
        """A single-use join token for ``cluster``; with ``node``, it enrols that name only."""
        async with self.store.session() as session:
            return self._add_join_token(session, cluster, ttl_s, node=node)

    @staticmethod
    def _add_join_token(session: AsyncSession, cluster: str, ttl_s: float, *, node: str | None) -> NewToken:
        ident, token = new_token("join")
        now = time.time()
        session.add(
            JoinTokenRow(
                id=ident,
                token_hash=hash_token(token),
                cluster=cluster,
                created_at=now,
                expires_at=now + ttl_s,
                node=node,
            )
        )
        name = f"join:{cluster}" if node is None else f"join:{cluster}:{node}"
        return NewToken(id=ident, name=name, token=token, scopes=[], expires_at=now + ttl_s)

    async def redeem_join_token(
        self,
        token: str,
        *,
        node: str,
        public_key: str,
        cluster: str | None = None,
        replaced_by: str | None = None,
    ) -> str:
        """Use a join token once: record the node's public key; the token's cluster.

        Raises JoinRefused (or a subclass) with the reason; a refused token stays unused. A name
        with active credentials is refused (NodeAlreadyEnrolled): taking over a live node is an
        admin's act, ``replaced_by`` (the admin principal's name; audited as ``NodeRekeyed``) or
        a rekey (:meth:`rekey_node`), which revokes the key first. A name whose credentials were
        revoked enrols again. ``cluster``: the cluster the agent asks for; a token for another
        one is refused.
        """
        ident = token_id(token, "join")
        if ident is None:
            raise JoinRefused("not a join token")
        now = time.time()
        async with self.store.session() as session:
            row = await session.get(JoinTokenRow, ident, with_for_update=True)
            if row is None or not tokens_equal(token, row.token_hash):
                raise JoinRefused("unknown join token")
            if row.used_at is not None:
                raise JoinRefused("join token already used")
            if row.expires_at <= now:
                raise JoinRefused("join token expired")
            if cluster is not None and cluster != row.cluster:
                raise JoinRefused(f"join token is for cluster {row.cluster!r}, not {cluster!r}")
            if row.node is not None and row.node != node:
                raise JoinTokenBound(
                    f"join token is bound to node {row.node!r}, not {node!r}", token_id=ident
                )
            cred = await session.get(NodeCredentialRow, node, with_for_update=True)
            live = cred is not None and cred.revoked_at is None
            if live and replaced_by is None:
                raise NodeAlreadyEnrolled(
                    f"node {node!r} is enrolled; to give it a new key, an admin runs "
                    f"'controlplane node rekey {node}'",
                    token_id=ident,
                )
            taken = await session.scalar(
                select(NodeCredentialRow).where(
                    NodeCredentialRow.public_key == public_key, NodeCredentialRow.node != node
                )
            )
            if taken is not None:
                raise JoinRefused("public key already enrolled for another node")
            row.used_at = now
            row.used_by = node
            if cred is None:
                session.add(
                    NodeCredentialRow(node=node, cluster=row.cluster, public_key=public_key, created_at=now)
                )
            else:
                previous_key = cred.public_key
                cred.cluster = row.cluster
                cred.public_key = public_key
                cred.created_at = now
                cred.revoked_at = None
                cred.capacity = None  # a new identity: its first registration sets the bound again
                if live:
                    self.store.add_event(
                        session,
                        "NodeRekeyed",
                        "node",
                        node,
                        f"live key replaced by {replaced_by} with join token {ident}",
                        {
                            "by": replaced_by,
                            "join_token_id": ident,
                            "public_key": public_key,
                            "previous_public_key": previous_key,
                        },
                    )
            self.store.add_event(
                session,
                "NodeEnrolled",
                "node",
                node,
                f"enrolled in cluster {row.cluster} with join token {ident}",
                {"cluster": row.cluster, "public_key": public_key, "join_token_id": ident},
            )
            return row.cluster

    async def record_join_refused(self, node: str, reason: str, *, token_id: str) -> None:
        """The event of a valid join token refused for ``node`` (``JoinRefused``): its id, never
        the token."""
        async with self.store.session() as session:
            self.store.add_event(session, "JoinRefused", "node", node, reason, {"join_token_id": token_id})

    async def rekey_node(self, node: str, *, ttl_s: float, by: str) -> NewToken:
        """Revoke ``node``'s key and return a single-use join token bound to it (in its cluster),
        with which it enrols a new key; audited as ``NodeRekeyed``. NotEnrolled when the store
        never enrolled that name (use ``agent-token create --node``)."""
        async with self.store.session() as session:
            cred = await session.get(NodeCredentialRow, node, with_for_update=True)
            if cred is None:
                raise NotEnrolled(f"node {node!r} was never enrolled")
            now = time.time()
            was_live = cred.revoked_at is None
            if was_live:
                cred.revoked_at = now
            new = self._add_join_token(session, cred.cluster, ttl_s, node=node)
            self.store.add_event(
                session,
                "NodeRekeyed",
                "node",
                node,
                f"key {'revoked' if was_live else 'already revoked'} by {by}; "
                f"join token {new.id} bound to it",
                {"by": by, "join_token_id": new.id, "previous_public_key": cred.public_key},
            )
            return new

    async def bind_capacity(self, node: str, claimed: dict[str, Any]) -> dict[str, Any] | None:
        """The capacity ``node``'s active credentials admit: the one recorded, or ``claimed``
        recorded now (its first registration with this key). None: no active credentials."""
        async with self.store.session() as session:
            cred = await session.get(NodeCredentialRow, node, with_for_update=True)
            if cred is None or cred.revoked_at is not None:
                return None
            if cred.capacity is None:
                cred.capacity = dict(claimed)
                self.store.add_event(
                    session,
                    "NodeCapacityRecorded",
                    "node",
                    node,
                    "capacity at its first registration with this key; more needs an admin",
                    dict(claimed),
                )
            return dict(cred.capacity)

    async def approve_capacity(self, node: str, *, by: str) -> dict[str, Any] | None:
        """Forget the capacity ``node``'s key admits, so that its next registration records a new
        one (``NodeCapacityApproved``); the old one. NotEnrolled without active credentials."""
        async with self.store.session() as session:
            cred = await session.get(NodeCredentialRow, node, with_for_update=True)
            if cred is None or cred.revoked_at is not None:
                raise NotEnrolled(f"node {node!r} has no active credentials")
            previous = cred.capacity
            cred.capacity = None
            self.store.add_event(
                session,
                "NodeCapacityApproved",
                "node",
                node,
                f"{by} approved a new capacity: the next registration records it",
                {"by": by, "previous": previous},
            )
            return previous

    async def node_credentials(self) -> list[NodeCredentialRow]:
        """Active (unrevoked) node credentials."""
        async with self.store.session() as session:
            rows = await session.scalars(
                select(NodeCredentialRow)
                .where(NodeCredentialRow.revoked_at.is_(None))
                .order_by(NodeCredentialRow.node)
            )
            return list(rows)

    async def node_credential(self, node: str) -> NodeCredentialRow | None:
        async with self.store.session() as session:
            row = await session.get(NodeCredentialRow, node)
            return row if row is not None and row.revoked_at is None else None

    async def revoked_among(self, nodes: list[str]) -> set[str]:
        """The names in ``nodes`` whose credentials are revoked (one never enrolled is not)."""
        if not nodes:
            return set()
        async with self.store.session() as session:
            rows = await session.scalars(
                select(NodeCredentialRow.node).where(
                    NodeCredentialRow.node.in_(nodes), NodeCredentialRow.revoked_at.is_not(None)
                )
            )
            return set(rows)

    async def revoke_node(self, node: str) -> bool:
        """Remove a node's NATS identity; False when it had none."""
        async with self.store.session() as session:
            row = await session.get(NodeCredentialRow, node)
            if row is None or row.revoked_at is not None:
                return False
            row.revoked_at = time.time()
            self.store.add_event(session, "NodeRevoked", "node", node, "credentials revoked")
            return True
