"""Identity records: API tokens, agent join tokens and node NATS credentials.

Only hashes of tokens and public keys are stored. Every method is one short transaction on the
``Store``'s engine, so the CLI (``controlplane token ...``) and a running hub can share a database.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select, update

from controlplane.auth.tokens import Principal, hash_token, new_token, token_id, tokens_equal
from controlplane.store.models import ApiTokenRow, JoinTokenRow, NodeCredentialRow
from controlplane.store.store import Store

__all__ = ["IdentityStore", "JoinRefused", "NewToken"]

# A token in use is stamped at most this often (a write per request would be wasteful).
_TOUCH_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just created: ``token`` is shown once, never stored."""

    id: str
    name: str
    token: str
    scopes: list[str]
    expires_at: float | None


class JoinRefused(Exception):
    """A join token that is unknown, expired, used, or for another cluster."""


class IdentityStore:
    def __init__(self, store: Store) -> None:
        self.store = store

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
        """The principal of a valid, unexpired, unrevoked API token; None otherwise."""
        ident = token_id(token, "api")
        if ident is None:
            return None
        now = time.time()
        async with self.store.session() as session:
            row = await session.get(ApiTokenRow, ident)
            if row is None or not tokens_equal(token, row.token_hash):
                return None
            if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
                return None
            if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY_S:
                row.last_used_at = now
            return Principal(token_id=row.id, name=row.name, scopes=frozenset(row.scopes))

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
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

    # --- join tokens and node credentials -------------------------------------------------

    async def create_join_token(self, cluster: str, ttl_s: float) -> NewToken:
        ident, token = new_token("join")
        now = time.time()
        async with self.store.session() as session:
            session.add(
                JoinTokenRow(
                    id=ident,
                    token_hash=hash_token(token),
                    cluster=cluster,
                    created_at=now,
                    expires_at=now + ttl_s,
                )
            )
        return NewToken(id=ident, name=f"join:{cluster}", token=token, scopes=[], expires_at=now + ttl_s)

    async def redeem_join_token(
        self, token: str, *, node: str, public_key: str, cluster: str | None = None
    ) -> str:
        """Use a join token once: record the node's public key; the token's cluster.

        Raises JoinRefused with the reason. Re-enrolling a node name replaces its key (a
        reinstalled agent), which needs a fresh join token like any enrolment. ``cluster``: the
        cluster the agent asks for; a token for another one is refused and stays unused.
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
            taken = await session.scalar(
                select(NodeCredentialRow).where(
                    NodeCredentialRow.public_key == public_key, NodeCredentialRow.node != node
                )
            )
            if taken is not None:
                raise JoinRefused("public key already enrolled for another node")
            row.used_at = now
            row.used_by = node
            cred = await session.get(NodeCredentialRow, node)
            if cred is None:
                session.add(
                    NodeCredentialRow(node=node, cluster=row.cluster, public_key=public_key, created_at=now)
                )
            else:
                cred.cluster = row.cluster
                cred.public_key = public_key
                cred.created_at = now
                cred.revoked_at = None
            self.store.add_event(
                session,
                "NodeEnrolled",
                "node",
                node,
                f"enrolled in cluster {row.cluster} with join token {ident}",
                {"cluster": row.cluster, "public_key": public_key, "join_token_id": ident},
            )
            return row.cluster

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

    async def revoke_node(self, node: str) -> bool:
        """Remove a node's NATS identity; False when it had none."""
        async with self.store.session() as session:
            row = await session.get(NodeCredentialRow, node)
            if row is None or row.revoked_at is not None:
                return False
            row.revoked_at = time.time()
            self.store.add_event(session, "NodeRevoked", "node", node, "credentials revoked")
            return True
