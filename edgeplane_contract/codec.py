"""The message codec: dataclasses to JSON bytes and back, strictly checked against the type hints.

A decoder rejects unknown versions, missing or mistyped fields, non-finite or out-of-range numbers
with :class:`MessageError` naming the field; the receiver counts, logs and drops such a message.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any, TypeVar, Union

from edgeplane_contract.errors import EdgeplaneError

__all__ = ["SCHEMA_VERSION", "MessageError", "decode", "encode", "parse"]

SCHEMA_VERSION = 1


class MessageError(EdgeplaneError, ValueError):
    """A NATS payload that is not a valid message of the expected type."""

    code = "invalid_message"
    http_status = 400

    def __init__(self, message_type: str, reason: str, *, field: str | None = None) -> None:
        where = f" (field {field!r})" if field else ""
        super().__init__(f"bad {message_type}{where}: {reason}", field=field)
        self.message_type = message_type
        self.reason = reason
        self.field = field


M = TypeVar("M")


def encode(message: Any) -> bytes:
    """Serialise a message dataclass to compact JSON bytes."""
    return json.dumps(dataclasses.asdict(message), separators=(",", ":")).encode()


def decode(data: bytes, message_type: type[M]) -> M:
    """Parse and validate bytes into ``message_type``; raises MessageError on anything wrong."""
    name = getattr(message_type, "TYPE", message_type.__name__)
    try:
        raw = json.loads(data)
    # ValueError: also integers of more than 4300 digits; RecursionError: nesting past the stack.
    except (ValueError, RecursionError) as exc:
        raise MessageError(name, f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(raw, dict):
        raise MessageError(name, "not a JSON object")
    version = raw.get("v", None)
    if version != SCHEMA_VERSION:
        raise MessageError(name, f"unsupported schema version {version!r}", field="v")
    return _build(message_type, raw, name, "")


def parse(raw: Any, message_type: type[M]) -> M:
    """Validate an already-decoded JSON object into ``message_type`` (a message or a nested part,
    e.g. a stored ``RunSpec``); raises MessageError naming the field."""
    name = getattr(message_type, "TYPE", message_type.__name__)
    if not isinstance(raw, dict):
        raise MessageError(name, "not a JSON object")
    return _build(message_type, raw, name, "")


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


def _build(cls: type[M], raw: dict[str, Any], name: str, path: str) -> M:
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        where = f"{path}{f.name}"
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise MessageError(name, "missing", field=where)
            continue
        kwargs[f.name] = _convert(hints[f.name], raw[f.name], name, where)
    return cls(**kwargs)


def _convert(tp: Any, value: Any, name: str, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, name, where)
    if origin is list:
        if not isinstance(value, list):
            raise MessageError(name, "must be a list", field=where)
        (item_tp,) = typing.get_args(tp)
        return [_convert(item_tp, item, name, f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise MessageError(name, "must be an object", field=where)
        _, value_tp = typing.get_args(tp)
        return {str(k): _convert(value_tp, v, name, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise MessageError(name, "must be an object", field=where)
        return _build(tp, value, name, f"{where}.")  # type: ignore[arg-type]
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise MessageError(name, "must be a boolean", field=where)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MessageError(name, "must be an integer", field=where)
        if not -(2**63) <= value < 2**63:  # the store's integers are 64-bit (SQLite, PostgreSQL bigint)
            raise MessageError(name, "must be a 64-bit integer", field=where)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MessageError(name, "must be a number", field=where)
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if not math.isfinite(number):  # NaN or Infinity would leak into the store and the API's JSON
            raise MessageError(name, "must be a finite number", field=where)
        return number
    if tp is str:
        if not isinstance(value, str):
            raise MessageError(name, "must be a string", field=where)
        return value
    raise MessageError(name, f"unsupported type {tp!r}", field=where)
