"""One middleware maps every error to a JSON body ``{"error": {"code", "message", "field"}}``:
route code raises typed errors (``controlplane.errors``), never builds an error body itself."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from controlplane.errors import EdgeplaneError, error_body

__all__ = ["ERROR_SCHEMA", "error_middleware", "json_error"]

log = logging.getLogger("edgeplane.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# Hand-written: error_body() (controlplane/errors.py) writes these keys; an invocation's error
# adds more of its own (type, traceback) and the invocation_id beside it.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
            },
            "required": ["code", "message", "field"],
        }
    },
    "required": ["error"],
}


def json_error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "field": field}}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except EdgeplaneError as exc:
        return web.json_response(error_body(exc), status=exc.http_status, headers=exc.headers)
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
