"""Query and header parameters, each described once: ``parse`` reads it from a request and
``parameter`` is its OpenAPI Parameter Object."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from controlplane.errors import EdgeplaneError, ValidationError

__all__ = [
    "AFTER",
    "ASYNC",
    "CLUSTER",
    "CONTINUE",
    "EVENTS_LIMIT",
    "IDEMPOTENCY_KEY",
    "INVOKE_IDEMPOTENCY_KEY",
    "KIND",
    "LIMIT",
    "NAME",
    "NODE",
    "NODE_STATUS",
    "OBJECT_ID",
    "OFFSET",
    "VERSION",
    "WORKLOAD_STATUS",
    "WORKLOAD_STATUSES",
    "ChoiceQuery",
    "ContinueQuery",
    "Flag",
    "IdempotencyKey",
    "IntQuery",
    "InvalidContinueError",
    "TextQuery",
    "page",
]

WORKLOAD_STATUSES = ("Pending", "Scheduled", "Running", "Succeeded", "Failed", "Cancelling", "Cancelled")


@dataclass(frozen=True, slots=True)
class IntQuery:
    """An integer in [low, high]; ``default`` when absent (None: absent stays None)."""

    name: str
    low: int
    high: int
    default: int | None = None

    def parse(self, request: web.Request) -> int | None:
        raw = request.query.get(self.name)
        if raw is None:
            return self.default
        try:
            value = int(raw)
        except ValueError:
            raise ValidationError(f"must be an integer, got {raw!r}", field=self.name) from None
        if not self.low <= value <= self.high:
            raise ValidationError(f"must be between {self.low} and {self.high}", field=self.name)
        return value

    def parameter(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer", "minimum": self.low, "maximum": self.high}
        if self.default is not None:
            schema["default"] = self.default
        return {"name": self.name, "in": "query", "schema": schema}


@dataclass(frozen=True, slots=True)
class ChoiceQuery:
    """One of ``choices``, or None when absent."""

    name: str
    choices: tuple[str, ...]

    def parse(self, request: web.Request) -> str | None:
        value = request.query.get(self.name)
        if value is not None and value not in self.choices:
            raise ValidationError(f"must be one of {', '.join(self.choices)}", field=self.name)
        return value

    def parameter(self) -> dict[str, Any]:
        return {"name": self.name, "in": "query", "schema": {"type": "string", "enum": list(self.choices)}}


@dataclass(frozen=True, slots=True)
class TextQuery:
    """A free-text filter (any string), or None when absent."""

    name: str

    def parse(self, request: web.Request) -> str | None:
        return request.query.get(self.name)

    def parameter(self) -> dict[str, Any]:
        return {"name": self.name, "in": "query", "schema": {"type": "string"}}


@dataclass(frozen=True, slots=True)
class Flag:
    """True for one of ``on`` (any other value, or none, is False: never an error)."""

    name: str
    on: tuple[str, ...]

    def parse(self, request: web.Request) -> bool:
        return request.query.get(self.name) in self.on

    def parameter(self) -> dict[str, Any]:
        return {"name": self.name, "in": "query", "schema": {"type": "string", "enum": list(self.on)}}


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """The ``Idempotency-Key`` header: 1-``max_length`` characters of valid UTF-8, or None."""

    description: str = ""
    max_length: int = 128
    name: str = "Idempotency-Key"

    def parse(self, request: web.Request) -> str | None:
        key = request.headers.get(self.name)
        if key is None:
            return None
        if not 0 < len(key) <= self.max_length:
            raise ValidationError(f"must be 1-{self.max_length} characters", field=self.name)
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:  # aiohttp kept undecodable bytes as surrogates
            raise ValidationError("must be valid UTF-8", field=self.name) from None
        return key

    def parameter(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "in": "header",
            "schema": {"type": "string", "minLength": 1, "maxLength": self.max_length},
        }
        if self.description:
            out["description"] = self.description
        return out


class InvalidContinueError(EdgeplaneError):
    """A ``continue`` token this hub did not write (Kubernetes answers 400 too)."""

    code = "invalid_continue"
    http_status = 400


@dataclass(frozen=True, slots=True)
class ContinueQuery:
    """An opaque token for the next page of a list in newest-first order: the (created_at, id)
    of the previous page's last item, so that the next page starts after it however many new
    items arrived meanwhile (a keyset, not an offset). None when absent."""

    name: str = "continue"
    version: int = 1

    def token(self, created_at: float, item_id: str) -> str:
        """The token of the position just after the item (base64url JSON; opaque to clients)."""
        raw = json.dumps([self.version, created_at, item_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def parse(self, request: web.Request) -> tuple[float, str] | None:
        raw = request.query.get(self.name)
        if raw is None:
            return None
        try:
            decoded = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        except (binascii.Error, ValueError):
            decoded = None
        if (
            isinstance(decoded, list)
            and len(decoded) == 3
            and decoded[0] == self.version
            and isinstance(decoded[1], int | float)
            and not isinstance(decoded[1], bool)
            and math.isfinite(decoded[1])
            and isinstance(decoded[2], str)
        ):
            return float(decoded[1]), decoded[2]
        raise InvalidContinueError(
            "is not a token from a previous page of this list (pass the `continue` it answered)",
            field=self.name,
        )

    def parameter(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "in": "query",
            "description": "the `continue` of the previous page: the next page starts after its last item "
            "(stable while new items arrive; not with offset)",
            "schema": {"type": "string"},
        }


LIMIT = IntQuery("limit", 1, 1000, 100)
OFFSET = IntQuery("offset", 0, 10**9, 0)
EVENTS_LIMIT = IntQuery("limit", 1, 1000, 100)
AFTER = IntQuery("after", 0, 2**62, 0)
VERSION = IntQuery("version", 1, 10**9)
NODE_STATUS = ChoiceQuery("status", ("Ready", "NotReady"))
WORKLOAD_STATUS = ChoiceQuery("status", WORKLOAD_STATUSES)
ASYNC = Flag("async", ("1", "true"))
FORGET = Flag("forget", ("1", "true"))  # DELETE /v1/nodes/{name}: delete the node, not only its key
FORCE = Flag("force", ("1", "true"))  # with forget: a Ready node too
CLUSTER = TextQuery("cluster")
NAME = TextQuery("name")
NODE = TextQuery("node")
KIND = TextQuery("kind")
OBJECT_ID = TextQuery("object_id")
CONTINUE = ContinueQuery()
IDEMPOTENCY_KEY = IdempotencyKey()
INVOKE_IDEMPOTENCY_KEY = IdempotencyKey(
    "a retry with the same key is the same invocation: nothing runs again"
)


def page(request: web.Request) -> tuple[int, int]:
    """``limit`` and ``offset`` of a list."""
    limit, offset = LIMIT.parse(request), OFFSET.parse(request)
    assert limit is not None and offset is not None  # both have defaults
    return limit, offset
