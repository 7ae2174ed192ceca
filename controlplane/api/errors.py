"""One middleware maps every error to a JSON body ``{"error": {"code", "message", "field"}}``:
route code raises typed errors (``controlplane.errors``), never builds an error body itself."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from controlplane.errors import EdgeplaneError, StoreUnavailableError, error_body
from controlplane.ratelimited_log import RateLimitedLog
from controlplane.store.availability import from_database, is_unavailable, short_reason

__all__ = ["CLIENT_CLOSED_REQUEST", "ERROR_SCHEMA", "client_gone", "error_middleware", "json_error"]

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


# The store's outage, logged once per interval per app process (not a traceback per request).
_STORE_OUTAGE_LOG = RateLimitedLog(log, interval_s=10.0)


def _log_store_outage(reason: str) -> None:
    _STORE_OUTAGE_LOG.log(
        "store",
        "store unavailable: %(reason)s; answering 503",
        "store unavailable: %(count)d more request(s) answered 503 in the last %(interval)s s: %(reason)s",
        reason=reason,
    )


# The status a request whose client went away is logged with (nginx's "client closed request").
CLIENT_CLOSED_REQUEST = 499


def client_gone(request: web.Request) -> bool:
    """True when the request's client has closed its connection (nothing can be answered)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def json_error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "field": field}}, status=status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except StoreUnavailableError as exc:
        _log_store_outage(exc.reason)
        return web.json_response(error_body(exc), status=exc.http_status, headers=exc.headers)
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
    except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
        if not client_gone(request):  # another connection of the handler's: its own error
            log.exception("unhandled error on %s %s", request.method, request.path)
            return json_error(500, "internal", "internal error; see the hub's log")
        # The client went away (mid-body, or while a stream was written): not the hub's error.
        log.info("client disconnected during %s %s", request.method, request.path)
        return web.Response(status=CLIENT_CLOSED_REQUEST)
    except Exception as exc:
        if from_database(exc) and is_unavailable(exc):  # one that left the store other than by a session
            unavailable = StoreUnavailableError(short_reason(exc))
            _log_store_outage(unavailable.reason)
            return web.json_response(error_body(unavailable), status=503, headers=unavailable.headers)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return json_error(500, "internal", "internal error; see the hub's log")
