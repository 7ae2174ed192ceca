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
from collections.abc import Callable
from typing import Any, TypeVar, Union, cast

import orjson

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
    """Serialise a message dataclass to compact JSON bytes (UTF-8, no spaces).

    orjson writes the dataclass directly (a tenth of the time of a walk to plain values and
    ``json.dumps``: every heartbeat, report, bid and command goes through here). What it does not
    take (a value of a type it does not know, e.g. a NumPy scalar, or a dict with a non-string
    key) goes the standard way (UTF-8 as well). orjson writes a non-finite float as ``null`` (the
    standard way writes ``NaN``, which the receiver refuses): the receiver refuses a required
    number (the field named) and reads an optional one as absent."""
    try:
        return orjson.dumps(message)
    except TypeError:
        return json.dumps(_plain(message), separators=(",", ":"), ensure_ascii=False).encode()


_LEAVES = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """What ``dataclasses.asdict`` gives for JSON, without its deep copy of every leaf."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    names = _FIELD_NAMES.get(kind)
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if kind is dict:
        return {key: _plain(item) for key, item in value.items()}
    return value


# Nineteen digits in a row: an integer orjson may read as a float (past 64 bits), or a number with
# more digits than a double holds; such frames are read by the standard parser. Found by mapping
# every digit to "0" and everything else to " " (bytes.translate and a substring search: a tenth
# of a regular expression's time).
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGITS = b"0" * 19


def _loads(data: bytes) -> Any:
    """``json.loads(data)``, by orjson where the two agree (four times faster on a heartbeat).

    orjson refuses what Python's parser takes and the builder must see to name the field (``NaN``,
    ``Infinity``, ``1e999``), and what it reads otherwise (a byte-order mark, UTF-16, a lone
    surrogate, nesting past 1,024): those frames, and any with a run of 19 digits (an integer
    past 64 bits orjson would make a float), are parsed by ``json.loads``, so every frame decodes
    to what it did before, or fails as before."""
    if type(data) is bytes and _LONG_DIGITS not in data.translate(_DIGITS_AS_ZEROS):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def decode(data: bytes, message_type: type[M]) -> M:
    """Parse and validate bytes into ``message_type``; raises MessageError on anything wrong."""
    name = getattr(message_type, "TYPE", message_type.__name__)
    try:
        raw = _loads(data)
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


# A converter checks one JSON value against one type hint and returns it converted:
# ``convert(value, name, base, key)``, where the field's path for an error is ``base`` then ``key``
# (a field name or ".key", or an int: a list index). The path is only formatted when it is needed
# (an error, a nested message): a heartbeat decodes without building a string per field.
Converter = Callable[[Any, str, str, "str | int"], Any]
Builder = Callable[[dict[str, Any], str, str], Any]
_CONVERTERS: dict[Any, Converter] = {}
_BUILDERS: dict[type, Builder] = {}
_MISSING = object()
_INT64 = (-(2**63), 2**63 - 1)

# Per leaf hint: an expression true when ``v`` is valid as it is (what json.loads gives for it),
# so that the generated builder converts only what is not (a wrong type: the converter's error).
_FAST_CHECKS: dict[Any, str] = {
    str: "v.__class__ is str",
    float: "(v.__class__ is float and v - v == 0.0)",  # finite: inf - inf and nan - nan are nan
    int: f"(v.__class__ is int and {_INT64[0]} <= v <= {_INT64[1]})",
    bool: "(v is True or v is False)",
    Any: "True",
}


def _where(base: str, key: str | int) -> str:
    return f"{base}[{key}]" if isinstance(key, int) else f"{base}{key}"


def _build(cls: type[M], raw: dict[str, Any], name: str, path: str) -> M:
    builder = _BUILDERS.get(cls)
    if builder is None:
        builder = _BUILDERS[cls] = _compile_builder(cls)
    return cast(M, builder(raw, name, path))


def _missing(name: str, path: str, field_name: str) -> MessageError:
    return MessageError(name, "missing", field=f"{path}{field_name}")


def _fast_check(tp: Any) -> str | None:
    """The inline check of ``tp`` for the generated builder (None: call its converter)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        if type(None) in args and len(inner) == 1 and (check := _FAST_CHECKS.get(inner[0])):
            return f"(v is None or {check})"
        return None
    try:
        return _FAST_CHECKS.get(tp)
    except TypeError:  # an unhashable hint
        return None


def _compile_builder(cls: type) -> Builder:
    """A function made for ``cls`` (once): its fields read, checked and converted in order, the
    first problem raised, as the field-by-field rule says; straight-line code, leaf checks inline
    (a heartbeat's decode is on the hub's hottest path: 10,000 agents, 10,000 a second)."""
    hints = typing.get_type_hints(cls)
    env: dict[str, Any] = {"cls": cls, "_MISSING": _MISSING, "_missing": _missing}
    lines = ["def build(raw, name, path):", "    kw = {}"]
    for index, f in enumerate(dataclasses.fields(cls)):
        convert = f"convert_{index}"
        env[convert] = _converter(hints[f.name])
        key = repr(f.name)
        lines.append(f"    v = raw.get({key}, _MISSING)")
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            lines.append(f"    if v is _MISSING: raise _missing(name, path, {key})")
            indent = "    "
        else:
            lines.append("    if v is not _MISSING:")
            indent = "        "
        check = _fast_check(hints[f.name])
        if check == "True":
            lines.append(f"{indent}kw[{key}] = v")
        elif check is not None:
            lines.append(f"{indent}kw[{key}] = v if {check} else {convert}(v, name, path, {key})")
        else:
            lines.append(f"{indent}kw[{key}] = {convert}(v, name, path, {key})")
    lines.append("    return cls(**kw)")
    exec("\n".join(lines), env)  # the source is made here, from the class's own field names
    return cast(Builder, env["build"])


def _converter(tp: Any) -> Converter:
    """The converter of type hint ``tp`` (made once per hint)."""
    try:
        return _CONVERTERS[tp]
    except KeyError:
        pass
    except TypeError:  # an unhashable hint: made each time (none of the contract's)
        return _make_converter(tp)
    convert = _make_converter(tp)
    _CONVERTERS[tp] = convert
    return convert


def _make_converter(tp: Any) -> Converter:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        inner = _converter(next(a for a in args if a is not type(None)))
        if type(None) not in args:
            return inner

        def optional(value: Any, name: str, base: str, key: str | int) -> Any:
            return None if value is None else inner(value, name, base, key)

        return optional
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        item = _converter(item_tp)

        def list_of(value: Any, name: str, base: str, key: str | int) -> Any:
            if not isinstance(value, list):
                raise MessageError(name, "must be a list", field=_where(base, key))
            if not value:
                return []
            where = _where(base, key)
            return [item(v, name, where, i) for i, v in enumerate(value)]

        return list_of
    if origin is dict:
        _, value_tp = typing.get_args(tp)
        item = _converter(value_tp)

        def dict_of(value: Any, name: str, base: str, key: str | int) -> Any:
            if not isinstance(value, dict):
                raise MessageError(name, "must be an object", field=_where(base, key))
            where = _where(base, key)
            return {str(k): item(v, name, where, f".{k}") for k, v in value.items()}

        return dict_of
    if dataclasses.is_dataclass(tp):
        cls = typing.cast(type, tp)

        def message(value: Any, name: str, base: str, key: str | int) -> Any:
            if not isinstance(value, dict):
                raise MessageError(name, "must be an object", field=_where(base, key))
            return _build(cls, value, name, _where(base, key) + ".")

        return message
    if tp is Any:
        return _any
    if tp is bool:
        return _bool
    if tp is int:
        return _int
    if tp is float:
        return _float
    if tp is str:
        return _str

    def unsupported(value: Any, name: str, base: str, key: str | int) -> Any:
        raise MessageError(name, f"unsupported type {tp!r}", field=_where(base, key))

    return unsupported


def _any(value: Any, name: str, base: str, key: str | int) -> Any:
    return value


def _bool(value: Any, name: str, base: str, key: str | int) -> Any:
    if value is True or value is False:
        return value
    raise MessageError(name, "must be a boolean", field=_where(base, key))


def _int(value: Any, name: str, base: str, key: str | int) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MessageError(name, "must be an integer", field=_where(base, key))
    if not -(2**63) <= value < 2**63:  # the store's integers are 64-bit (SQLite, PostgreSQL bigint)
        raise MessageError(name, "must be a 64-bit integer", field=_where(base, key))
    return value


def _float(value: Any, name: str, base: str, key: str | int) -> Any:
    if type(value) is float:  # the common case first: what json.loads gives for 1.5
        if value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
            return value
        raise MessageError(name, "must be a finite number", field=_where(base, key))
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MessageError(name, "must be a number", field=_where(base, key))
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range
        number = math.inf
    if not math.isfinite(number):  # NaN or Infinity would leak into the store and the API's JSON
        raise MessageError(name, "must be a finite number", field=_where(base, key))
    return number


def _str(value: Any, name: str, base: str, key: str | int) -> Any:
    if isinstance(value, str):
        return value
    raise MessageError(name, "must be a string", field=_where(base, key))
