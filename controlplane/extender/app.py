"""The extender's HTTP listener: ``POST /extender/filter`` and ``POST /extender/prioritize``
(kube-scheduler posts to ``urlPrefix + "/" + verb``), and ``GET /extender/healthz``.

The answers are computed on the event loop, between the hub's own scheduler calls (the
scheduler holds no locks and is only ever called from this loop), without awaiting anything.
A body that is not an ExtenderArgs is answered 400 with ``{"error", "field"}``; a pod edgeplane
cannot place is the filter's ``Error``, which kube-scheduler reports (or ignores, when
``ignorable``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from controlplane.errors import StartupError, ValidationError
from controlplane.extender.decide import filter_nodes, prioritize_nodes
from controlplane.extender.kube import ExtenderArgs, ExtenderFilterResult
from controlplane.extender.settings import ExtenderSettings
from controlplane.extender.translate import NODE_LABEL
from controlplane.scheduling.scheduler import Scheduler

__all__ = ["FILTER_VERB", "PATH_PREFIX", "PRIORITIZE_VERB", "RunningExtender", "create_app", "start_extender"]

log = logging.getLogger("edgeplane.extender")

PATH_PREFIX = "/extender"
FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"
# kube-scheduler sends whole Node objects when nodeCacheCapable is false: a few KiB each.
_MAX_BODY = 64 * 2**20

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(scheduler: Scheduler, *, node_label: str = NODE_LABEL) -> web.Application:
    """The extender's routes over ``scheduler`` (the hub's, read only)."""

    async def filter_verb(request: web.Request) -> web.StreamResponse:
        args = await _extender_args(request)
        try:
            result = filter_nodes(scheduler, args, node_label)
        except ValidationError:
            raise
        except Exception as exc:  # a bug here must reach kube as an answer, not as a 500
            log.exception("extender filter failed")
            result = ExtenderFilterResult(node_names_form=args.node_names_form, error=f"edgeplane: {exc}")
        return web.json_response(result.to_json())

    async def prioritize_verb(request: web.Request) -> web.StreamResponse:
        args = await _extender_args(request)
        return web.json_response([p.to_json() for p in prioritize_nodes(scheduler, args, node_label)])

    async def healthz(_: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok", "nodes": len(scheduler.nodes)})

    app = web.Application(client_max_size=_MAX_BODY, middlewares=[_bad_request])
    app.router.add_post(f"{PATH_PREFIX}/{FILTER_VERB}", filter_verb)
    app.router.add_post(f"{PATH_PREFIX}/{PRIORITIZE_VERB}", prioritize_verb)
    app.router.add_get(f"{PATH_PREFIX}/healthz", healthz)
    return app


async def _extender_args(request: web.Request) -> ExtenderArgs:
    raw = await request.read()
    try:
        body: Any = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise ValidationError(f"the body is not JSON: {exc}", field="body") from None
    return ExtenderArgs.from_json(body)


@web.middleware
async def _bad_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A malformed ExtenderArgs (or pod inside it) is a 400 naming the field, never a 500."""
    try:
        return await handler(request)
    except ValidationError as exc:
        return web.json_response({"error": exc.message, "field": exc.field}, status=400)


class RunningExtender:
    """A started extender listener; ``await stop()`` closes it."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self.runner = runner
        self.url = url

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_extender(settings: ExtenderSettings, scheduler: Scheduler) -> RunningExtender:
    """Serve the extender on ``settings``' address; StartupError (one line) when it cannot."""
    runner = web.AppRunner(create_app(scheduler, node_label=settings.node_label), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=settings.ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        where = f"{settings.host}:{settings.port}"
        raise StartupError(f"cannot serve the scheduler extender on {where}: {exc.strerror or exc}") from exc
    server = getattr(site, "_server", None)
    port = server.sockets[0].getsockname()[1] if server and server.sockets else settings.port
    scheme = "https" if settings.ssl_context is not None else "http"
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return RunningExtender(runner, f"{scheme}://{host}:{port}{PATH_PREFIX}")
