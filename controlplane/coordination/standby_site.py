"""What a standby hub answers on the API's port while another hub holds the store's lease.

Every replica serves the API: a standby forwards each request to the leading hub, whose address
the store's leadership row names (``fencing.py``), and streams its answer back, status, headers
and body as they are (hop-by-hop headers aside). The leader authenticates and authorises as for
any client. While no leader answers (it died and no replica has taken over yet, or it is frozen)
the standby says so: 503 ``unavailable`` with ``Retry-After`` and a JSON body, as the API's
errors do.

A standby's own probes stay its own: ``GET /livez`` is 200 (a livenessProbe leaves it running),
``GET /readyz`` and ``GET /healthz`` are 503 with ``"role": "standby"`` and the leader's address
(a Service that must reach the leader directly sends it nothing; one in front of all replicas
checks ``/livez``). Once the lease is acquired the site is closed and the hub serves the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from controlplane.coordination import forwarded
from controlplane.errors import LeaderLostError, StartupError, UnavailableError, error_body

__all__ = ["FORWARD_TIMEOUT_S", "RETRY_AFTER_S", "LeaderLookup", "start_standby_site"]

log = logging.getLogger("edgeplane.hub")

RETRY_AFTER_S = 2
FORWARD_TIMEOUT_S = 120.0  # a synchronous invocation may take its function's whole timeout
CONNECT_TIMEOUT_S = 2.0
LEADER_CACHE_S = 1.0

LeaderLookup = Callable[[], Awaitable[str | None]]
"""The leading hub's API address as the store names it now (None: no hub leads yet)."""

# Not forwarded either way (RFC 9110 7.6.1), and what the client library sets itself.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

_NO_LEADER = UnavailableError(
    "this hub is a standby and no leading hub answers now (one is taking over); retry shortly"
)


# Sent to the leader, no answer: it may have acted on it (the connection is not a receipt).
_LEADER_LOST = LeaderLostError(
    "the leading hub went away before it answered; the request may have been carried out: retry it "
    "with the same Idempotency-Key, or read what it would have changed"
)


def _unavailable(error: UnavailableError = _NO_LEADER) -> web.Response:
    return web.json_response(error_body(error), status=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _livez(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


class _Forwarder:
    def __init__(
        self, leader: LeaderLookup | None, client_ssl: ssl.SSLContext | None, forward_key: bytes | None = None
    ) -> None:
        self._leader = leader
        self._ssl = client_ssl
        self._forward_key = forward_key
        self._known: tuple[float, str | None] = (float("-inf"), None)
        self._session: aiohttp.ClientSession | None = None
        self.closing = asyncio.Event()

    async def leader_url(self) -> str | None:
        at, url = self._known
        if self._leader is None:
            return None
        if time.monotonic() - at > LEADER_CACHE_S:
            try:
                url = await asyncio.wait_for(self._leader(), timeout=CONNECT_TIMEOUT_S)
            except Exception as exc:  # the store is away: nobody to forward to now
                log.debug("standby: the leader's address could not be read: %s", exc)
                url = None
            self._known = (time.monotonic(), url)
        return url

    async def not_ready(self, request: web.Request) -> web.Response:
        body = {
            "status": "unavailable",
            "role": "standby",
            "leader": await self.leader_url(),
            "database": True,
            "nats": False,
            "hub": False,
            "down": ["nats", "hub"],
        }
        return web.json_response(body, status=503)

    async def forward(self, request: web.Request) -> web.StreamResponse:
        if self.closing.is_set():
            return _unavailable()
        url = await self.leader_url()
        if url is None:
            return _unavailable()
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        peer = request.remote or ""
        headers["X-Forwarded-For"] = ", ".join(x for x in (request.headers.get("X-Forwarded-For"), peer) if x)
        headers["Via"] = "1.1 edgeplane-standby"
        # Only this replica's own signature reaches the leader, never one a client sent.
        for name in [k for k in headers if k.lower() == forwarded.HEADER.lower()]:
            del headers[name]
        if self._forward_key is not None and peer:
            headers[forwarded.HEADER] = forwarded.forwarded_header(
                self._forward_key, peer, request.method, request.rel_url.path
            )
        body = await request.read()
        opening = asyncio.ensure_future(
            self._session.request(
                request.method,
                url + request.rel_url.path_qs,
                headers=headers,
                data=body if body else None,
                allow_redirects=False,
                ssl=self._ssl if self._ssl is not None and url.startswith("https://") else True,
            )
        )
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            # A standby that takes over closes this site: requests still waiting for a frozen
            # leader's answer get a 503 now instead of holding the takeover up.
            await asyncio.wait({opening, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not opening.done():  # this standby takes over: the frozen leader had the request
            opening.cancel()
            with contextlib.suppress(BaseException):
                await opening
            return _unavailable(_LEADER_LOST)
        try:
            upstream = opening.result()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._known = (float("-inf"), None)  # ask the store again next time
            log.info("standby: the leading hub at %s did not answer: %s", url, type(exc).__name__)
            # Refused at connect: it never had the request. Any other break came after sending it.
            delivered = not isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))
            return _unavailable(_LEADER_LOST if delivered else _NO_LEADER)
        try:
            reply = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    reply.headers.add(key, value)
            await reply.prepare(request)
            async for chunk in upstream.content.iter_chunked(64 * 1024):
                await reply.write(chunk)
            await reply.write_eof()
            return reply
        except (aiohttp.ClientError, TimeoutError) as exc:  # the answer broke off mid-way
            log.info("standby: the leading hub's answer from %s broke off: %s", url, type(exc).__name__)
            raise
        finally:
            upstream.release()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def start_standby_site(
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    *,
    leader: LeaderLookup | None = None,
    client_ssl: ssl.SSLContext | None = None,
    forward_key: bytes | None = None,
) -> web.AppRunner:
    """Serve the standby's answers on ``host:port``; :class:`StartupError` if it cannot bind.
    ``leader``: where to forward the API (None: answer 503 to everything but the probes);
    ``client_ssl``: how to verify an ``https`` leader; ``forward_key``: the replicas' key that
    signs the client each request is forwarded for (:mod:`.forwarded`)."""
    forwarder = _Forwarder(leader, client_ssl, forward_key)
    app = web.Application(client_max_size=2 * 1024**2)
    app.router.add_get("/livez", _livez)
    app.router.add_get("/readyz", forwarder.not_ready)
    app.router.add_get("/healthz", forwarder.not_ready)
    app.router.add_route("*", "/{tail:.*}", forwarder.forward)

    async def stop_forwarding(_app: web.Application) -> None:  # before the site waits for handlers
        forwarder.closing.set()

    async def close_client(_app: web.Application) -> None:
        await forwarder.close()

    app.on_shutdown.append(stop_forwarding)
    app.on_cleanup.append(close_client)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(f"cannot serve the API on {host}:{port}: {exc.strerror or exc}") from exc
    return runner
