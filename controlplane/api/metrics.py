"""``GET /metrics``: the hub's Prometheus metrics (text exposition format).

It needs a token with scope ``read`` like every read, unless the hub runs with
``--public-metrics`` (``AuthSettings.public_metrics``) for scrapers that cannot send one.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from controlplane.api.keys import HUB

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.StreamResponse:
    # The registry is this hub's (several hubs may run in one process), so the handler is made
    # per request: it only binds the registry, collecting is what costs.
    handler = make_aiohttp_handler(request.app[HUB].metrics.registry)
    return await handler(request)
