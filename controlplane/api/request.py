"""Request parsing shared by the route modules: JSON bodies and query parameters."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from controlplane.errors import BadRequestError, ValidationError

__all__ = ["MAX_BODY", "choice_query", "int_query", "json_body", "page"]

MAX_BODY = 1 << 20


def int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(f"must be an integer, got {raw!r}", field=name) from None
    if not low <= value <= high:
        raise ValidationError(f"must be between {low} and {high}", field=name)
    return value


def page(request: web.Request) -> tuple[int, int]:
    return int_query(request, "limit", 100, 1, 1000), int_query(request, "offset", 0, 0, 10**9)


def choice_query(request: web.Request, name: str, choices: tuple[str, ...]) -> str | None:
    value = request.query.get(name)
    if value is not None and value not in choices:
        raise ValidationError(f"must be one of {', '.join(choices)}", field=name)
    return value


async def json_body(request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise ValidationError(f"request body larger than {MAX_BODY} bytes", field="<body>")
    raw = await request.read()
    if not raw.strip():
        raise BadRequestError("request body is empty; send a JSON object", field="<body>")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequestError("request body is not UTF-8", field="<body>") from None
    except json.JSONDecodeError as exc:
        raise BadRequestError(
            f"request body is not valid JSON: {exc.msg} at char {exc.pos}", field="<body>"
        ) from None
