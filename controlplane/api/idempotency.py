"""Idempotency-Keys scoped to their caller, as payment APIs scope them to an account.

A key is the client's name for one request; two callers who pick the same name must not share a
request (a ``functions`` token replaying the admin's key would get the admin's invocation). So
the key stored and looked up is ``sha256(token id + NUL + key)`` in hex: callers' keys never
collide, the caller's own retry finds its first request, and the stored value is 64 characters
whatever the key (the column holds 128). A hub without authentication has one caller (id ``""``).
"""

from __future__ import annotations

import hashlib

from aiohttp import web

from controlplane.api.auth import principal_of
from controlplane.api.params import IdempotencyKey
from controlplane.auth.tokens import Principal

__all__ = ["caller_key", "scoped_key"]


def scoped_key(principal: Principal | None, key: str) -> str:
    """The stored form of ``key`` sent by ``principal`` (None: no authentication)."""
    owner = principal.token_id if principal is not None else ""
    return hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()


def caller_key(request: web.Request, header: IdempotencyKey) -> str | None:
    """The request's ``header`` (validated, 4xx naming it when malformed), scoped to its caller;
    None when the request has none."""
    key = header.parse(request)
    return None if key is None else scoped_key(principal_of(request), key)
