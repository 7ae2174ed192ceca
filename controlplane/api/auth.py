"""Who may call the API: bearer tokens with scopes, JSON-only bodies, per-token rate limits, audit.

Two middlewares:

- ``access_middleware`` (outermost) times every request, writes one access-log line (method, path,
  status, principal, duration) and records every mutating call but function invocations in the
  event log (``ApiCall``, with the token's name): the audit trail.
- ``auth_middleware`` (inside the error middleware, so its refusals are the usual JSON errors)
  authenticates ``Authorization: Bearer <token>`` (401), checks the scope the route needs (403),
  rate-limits per token (429 with ``Retry-After``) and refuses bodies that are not
  ``application/json`` (415): a browser cannot send that cross-site without a CORS preflight,
  which this API never grants.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from controlplane.api import console
from controlplane.api.audit import AuditLog
from controlplane.api.errors import CLIENT_CLOSED_REQUEST, client_gone
from controlplane.auth.tokens import Principal
from controlplane.coordination.forwarded import HEADER, forwarded_client
from controlplane.errors import (
    ForbiddenError,
    RateLimitedError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)
from controlplane.store.identities import IdentityStore

__all__ = [
    "AUDIT",
    "IDENTITIES",
    "PRINCIPAL",
    "PUBLIC_ROUTES",
    "AuthSettings",
    "RateLimiter",
    "access_middleware",
    "auth_middleware",
    "authenticate",
    "principal_of",
    "required_scope",
]

access_log = logging.getLogger("edgeplane.access")
log = logging.getLogger("edgeplane.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PRINCIPAL = web.RequestKey("principal", Principal)  # the caller, once authenticated
IDENTITIES = web.AppKey("identities", IdentityStore)
AUDIT = web.AppKey("audit", AuditLog)

# (method, path) pairs that need no bearer token: health for probes, enrolment, whose
# credential is the single-use join token in its body, and the console's static files.
PUBLIC_ROUTES: frozenset[tuple[str, str]] = (
    frozenset(
        {(method, path) for method in ("GET", "HEAD") for path in ("/healthz", "/livez", "/readyz")}
        | {("POST", "/v1/join")}
    )
    | console.PUBLIC_ROUTES
)
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPES = frozenset({"application/json"})


def required_scope(method: str, path: str) -> str:
    """The scope an operation needs: reads need ``read``; writes the scope of their resource."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    if path.startswith("/v1/workloads"):
        return "workloads"
    if path.startswith(("/v1/functions", "/v1/invocations")):
        return "functions"
    if path.startswith("/v1/nodes"):
        return "nodes"
    return "admin"


def principal_of(request: web.Request) -> Principal | None:
    return request.get(PRINCIPAL)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """API access settings, parsed once at the entry point.

    ``rate_per_s``/``burst``: each token's bucket (0 disables the limit). ``public_metrics``
    leaves ``/metrics`` open for scrapers that cannot send a token.
    """

    rate_per_s: float = 50.0
    burst: int = 200
    public_metrics: bool = False
    #: The replicas' key for the client a standby forwards for (coordination/forwarded.py);
    #: None: a forwarded request counts as its peer's.
    forward_key: bytes | None = field(default=None, repr=False)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass
class RateLimiter:
    """Token buckets per key; ``take`` answers 0 or the seconds to wait."""

    rate_per_s: float
    burst: int
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take(self, key: str, now: float | None = None) -> float:
        if self.rate_per_s <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=float(self.burst), updated=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate_per_s)
        bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate_per_s


AUTH_SETTINGS = web.AppKey("auth_settings", AuthSettings)
RATE_LIMITER = web.AppKey("rate_limiter", RateLimiter)


def _is_public(request: web.Request) -> bool:
    if (request.method, request.path) in PUBLIC_ROUTES:
        return True
    return request.path == "/metrics" and request.app[AUTH_SETTINGS].public_metrics


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization")
    if not header:
        raise UnauthorizedError("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError("Authorization must be 'Bearer <token>'")
    return token.strip()


def _check_body_type(request: web.Request) -> None:
    if request.method not in MUTATING or not request.body_exists:
        return
    if request.content_type not in JSON_TYPES:
        raise UnsupportedMediaTypeError(
            f"request bodies must be application/json, not {request.content_type or 'missing'!r}",
            field="Content-Type",
        )


def client_address(request: web.Request) -> str:
    """The caller's address: the peer's, or the client a replica of this hub forwarded for (a
    header only a replica can sign; see coordination/forwarded.py)."""
    forwarded = forwarded_client(
        request.app[AUTH_SETTINGS].forward_key, request.headers.get(HEADER), request.method, request.path
    )
    return forwarded or request.remote or ""


def _take(request: web.Request, key: str, who: str) -> None:
    wait_s = request.app[RATE_LIMITER].take(key)
    if wait_s > 0:
        raise RateLimitedError(
            f"rate limit of {who} exceeded; retry later", retry_after_s=max(1, math.ceil(wait_s))
        )


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if _is_public(request):
        if request.path == "/v1/join":
            # Its credential is in the body: bound the attempts per address like a token's calls.
            _take(request, f"join:{client_address(request)}", "join attempts from this address")
        _check_body_type(request)
        return await handler(request)
    await authenticate(request, required_scope(request.method, request.path))
    _check_body_type(request)
    return await handler(request)


async def authenticate(request: web.Request, scope: str) -> Principal:
    """The caller of ``request``, whose bearer token must grant ``scope`` (401, 429, 403); kept as
    the request's principal (the audit names it). The middleware calls it for every non-public
    route; a public route's privileged variant (``POST /v1/join`` with ``replace``) calls it
    itself."""
    token = _bearer(request)
    principal = await request.app[IDENTITIES].authenticate(token)
    if principal is None:
        raise UnauthorizedError("token unknown, expired or revoked")
    request[PRINCIPAL] = principal
    _take(request, principal.token_id, f"token {principal.name!r}")
    if not principal.allows(scope):
        raise ForbiddenError(
            f"token {principal.name!r} lacks scope {scope!r} for {request.method} {request.path}",
            field="Authorization",
        )
    return principal


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        # A client that left before its answer could be written: logged as such, not as served.
        status = CLIENT_CLOSED_REQUEST if client_gone(request) else response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        # aiohttp cancels the handler of a client that went away (handler_cancellation), and so
        # does a stopping server: the request was not answered, never an error of its own.
        status = CLIENT_CLOSED_REQUEST
        raise
    finally:
        elapsed_ms = (time.perf_counter() - started) * 1000
        principal = principal_of(request)
        who = principal.name if principal else "-"
        access_log.info("%s %s %d principal=%s %.1fms", request.method, request.path, status, who, elapsed_ms)
        if principal is not None and request.method in MUTATING and not _is_invocation(request.path):
            _audit(request, principal, status, elapsed_ms)


def _is_invocation(path: str) -> bool:
    """Invocations are the data plane: access-logged, but not one audit event each (they would
    drown the control-plane changes the event log is for, and cost a write per call)."""
    return path.startswith("/v1/functions/") and path.endswith("/invoke")


def _audit(request: web.Request, principal: Principal, status: int, elapsed_ms: float) -> None:
    """Queue the call's ``ApiCall`` event: written off the request path (``api/audit.py``)."""
    request.app[AUDIT].record(
        "ApiCall",
        "token",
        principal.name[:63],
        f"{request.method} {request.path} -> {status}",
        {
            "method": request.method,
            "path": request.path,
            "status": status,
            "principal": principal.name,
            "token_id": principal.token_id,
            "duration_ms": round(elapsed_ms, 1),
        },
    )
