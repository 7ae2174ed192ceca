"""One middleware maps every error to a JSON body ``{"error": {"code", "message", "field"}}``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from controlplane.errors import EdgeplaneError

__all__ = ["error_middleware", "json_error"]

log = logging.getLogger("edgeplane.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "field": field}}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except EdgeplaneError as exc:
        response = json_error(exc.http_status, exc.code, exc.message, exc.field)
        response.headers.update(exc.headers)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status, "http_error")
        response = json_error(exc.status, code, exc.reason, "<body>" if exc.status == 413 else None)
        if isinstance(exc, web.HTTPMethodNotAllowed):
            # RFC 9110: a 405 must say which methods the resource does support.
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal", "internal error; see the hub's log")
