"""Request bodies as strict JSON, shared by the route modules (query parameters: params.py)."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from controlplane.errors import BadRequestError, PayloadTooLargeError, ValidationError
from controlplane.federation.config import FederationConfig

__all__ = [
    "MAX_BODY",
    "MAX_JSON_DEPTH",
    "check_clusters",
    "json_body",
    "parse_json",
    "read_body",
    "strict_json",
]

MAX_BODY = 1 << 20
# Deeper bodies are refused before anything walks them recursively (parsers, the store's JSON
# encoder, the NATS encoder); no request of this API needs more than a handful of levels.
MAX_JSON_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _Rejected:
    """A number strict JSON cannot carry (NaN, Infinity, out of range), kept to name its field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> float | _Rejected:
    value = float(text)
    return value if math.isfinite(value) else _Rejected(text)


def _parse_int(text: str) -> int | _Rejected:
    # Checked on the text first: int() of a few thousand digits is slow, and above 4300 raises.
    if len(text.lstrip("-")) > 19:
        return _Rejected(text)
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else _Rejected(text)


def strict_json(value: Any) -> None:
    """Raise ValidationError naming the first field that is too deep, not a finite 64-bit number
    or not valid Unicode (a lone surrogate); iterative, so depth itself cannot overflow the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        where = path or "<body>"
        if isinstance(node, _Rejected):
            raise ValidationError(
                f"{node.text} is not a finite number within 64 bits (NaN and Infinity are not JSON)",
                field=where,
            )
        if isinstance(node, str):
            _check_unicode(node, where)
        elif isinstance(node, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise ValidationError(f"nested deeper than {MAX_JSON_DEPTH} levels", field=where)
            if isinstance(node, dict):
                for key, item in reversed(node.items()):
                    child = f"{path}.{key}" if path else str(key)
                    _check_unicode(key, child)
                    stack.append((item, child, depth + 1))
            else:
                stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in reversed(list(enumerate(node))))


def _check_unicode(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("is not valid Unicode (a lone surrogate)", field=where) from None


def parse_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, finite 64-bit numbers, at most MAX_JSON_DEPTH levels of nesting."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("request body is not UTF-8", field="<body>") from None
    try:
        value = json.loads(text, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_Rejected)
    except json.JSONDecodeError as exc:
        raise BadRequestError(
            f"request body is not valid JSON: {exc.msg} at char {exc.pos}", field="<body>"
        ) from None
    except RecursionError:
        raise ValidationError(f"nested deeper than {MAX_JSON_DEPTH} levels", field="<body>") from None
    strict_json(value)
    return value


async def read_body(request: web.Request) -> bytes:
    """The raw body, or 413 (naming the body) when it is larger than MAX_BODY."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise PayloadTooLargeError(
            f"request body of {request.content_length} bytes is larger than {MAX_BODY}", field="<body>"
        )
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:  # no Content-Length: aiohttp counted past client_max_size
        raise PayloadTooLargeError(f"request body is larger than {MAX_BODY} bytes", field="<body>") from None


async def json_body(request: web.Request, *, optional: bool = False) -> Any:
    """The body as strict JSON; ``optional``: an empty body is None instead of a 400."""
    raw = await read_body(request)
    if not raw.strip():
        if optional:
            return None
        raise BadRequestError("request body is empty; send a JSON object", field="<body>")
    return parse_json(raw)


def check_clusters(
    federation: FederationConfig, clusters: list[str], field: str = "affinity.clusters"
) -> None:
    """A 422 naming ``field`` for a cluster the federation does not know."""
    for cluster in clusters:
        if federation.cluster(cluster) is None:
            raise ValidationError(f"unknown cluster {cluster!r}", field=field)
