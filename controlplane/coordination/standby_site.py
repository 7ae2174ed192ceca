"""What a standby hub answers on the API's port while another hub holds the store's lease.

A standby is alive but not ready: ``GET /livez`` is 200 (a Kubernetes livenessProbe leaves it
running), ``GET /readyz`` and ``GET /healthz`` are 503 (a Service or load balancer sends it no
traffic), and every other request is 503 ``unavailable`` with ``Retry-After`` and a JSON body
that says why, as the API's errors do. Once the lease is acquired the site is closed and the hub
serves the port.
"""

from __future__ import annotations

import ssl

from aiohttp import web

from controlplane.errors import StartupError, UnavailableError, error_body

__all__ = ["RETRY_AFTER_S", "start_standby_site"]

RETRY_AFTER_S = 2

_STANDBY = UnavailableError("this hub is a standby: another hub is active on this store; retry shortly")


async def _livez(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _not_ready(request: web.Request) -> web.Response:
    body = {"status": "unavailable", "database": True, "nats": False, "hub": False, "down": ["nats", "hub"]}
    return web.json_response(body, status=503)


async def _elsewhere(request: web.Request) -> web.Response:
    return web.json_response(error_body(_STANDBY), status=503, headers={"Retry-After": str(RETRY_AFTER_S)})


async def start_standby_site(
    host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Serve the standby's answers on ``host:port``; :class:`StartupError` if it cannot bind."""
    app = web.Application()
    app.router.add_get("/livez", _livez)
    app.router.add_get("/readyz", _not_ready)
    app.router.add_get("/healthz", _not_ready)
    app.router.add_route("*", "/{tail:.*}", _elsewhere)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    except OSError as exc:
        await runner.cleanup()
        raise StartupError(f"cannot serve the API on {host}:{port}: {exc.strerror or exc}") from exc
    return runner
