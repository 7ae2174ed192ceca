"""The read-only web console: ``GET /console`` and its script and style sheet.

The page holds no data, so it is public; the script reads the API with the bearer token the user
pastes (kept in ``sessionStorage``), so every number it shows passes the same auth as curl. The
files are package data under ``controlplane/console/`` and are sent as they are (no build step).
Every answer carries a strict Content-Security-Policy: only this origin's script and style, no
inline code, no framing, so an API string that slipped into the DOM still could not run.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from aiohttp import web

__all__ = ["OPENAPI_PATHS", "PUBLIC_ROUTES", "routes"]

# path -> (file under controlplane/console/, content type)
_FILES: dict[str, tuple[str, str]] = {
    "/console": ("index.html", "text/html"),
    "/console/console.js": ("console.js", "text/javascript"),
    "/console/console.css": ("console.css", "text/css"),
}

# The auth middleware lets these through without a token (the data calls still need one).
PUBLIC_ROUTES: frozenset[tuple[str, str]] = frozenset(
    (method, path) for path in _FILES for method in ("GET", "HEAD")
)

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Revalidate each time: after an upgrade the page and its script must not mix versions.
    "Cache-Control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return resources.files("controlplane.console").joinpath(name).read_bytes()


def _serve(path: str) -> web.Response:
    name, content_type = _FILES[path]
    return web.Response(body=_read(name), content_type=content_type, charset="utf-8", headers=HEADERS)


routes = web.RouteTableDef()


@routes.get("/console")
async def console_page(request: web.Request) -> web.Response:
    return _serve(request.path)


@routes.get("/console/console.js")
async def console_script(request: web.Request) -> web.Response:
    return _serve(request.path)


@routes.get("/console/console.css")
async def console_style(request: web.Request) -> web.Response:
    return _serve(request.path)


def _operation(operation_id: str, summary: str, content_type: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "description": "Public: static, holds no data; the console calls the API with a bearer token.",
            "responses": {
                "200": {"description": "OK", "content": {content_type: {"schema": {"type": "string"}}}}
            },
        }
    }


OPENAPI_PATHS: dict[str, Any] = {
    "/console": _operation("console", "The read-only web console (HTML)", "text/html"),
    "/console/console.js": _operation("consoleScript", "The console's script", "text/javascript"),
    "/console/console.css": _operation("consoleStyle", "The console's style sheet", "text/css"),
}
