"""Declarative request models: one description of each field drives both its parser and its JSON Schema.

A :class:`Model` lists its :class:`Field` s in the order they are checked. ``Model.parse`` turns a
JSON body into the model's dataclass (absent fields take the dataclass's defaults) or raises
:class:`ValidationError` naming the first bad field; ``Model.schema`` states the same rules as JSON
Schema (2020-12, as OpenAPI 3.1 takes it). What JSON Schema cannot state (one field checked
against another, Python source that must compile) is a ``Field.check`` or a :class:`Custom` kind,
whose schema is written by hand beside its parser.

What responses carry is documented from its types instead: :mod:`controlplane.typeschema`.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from controlplane.errors import ValidationError

__all__ = [
    "Boolean",
    "Choice",
    "Custom",
    "Field",
    "Integer",
    "Kind",
    "Model",
    "Nested",
    "Number",
    "StringList",
    "StringMap",
    "Text",
    "nullable",
]

T = TypeVar("T")
Schema = dict[str, Any]


class Kind(Protocol):
    """A value's type and rules: ``parse`` enforces them, ``schema`` documents them."""

    def parse(self, value: Any, where: str) -> Any: ...

    def schema(self) -> Schema: ...


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Integer:
    low: int
    high: int
    message: str = ""

    def parse(self, value: Any, where: str) -> int:
        if not _is_int(value) or not self.low <= value <= self.high:
            raise ValidationError(
                self.message or f"must be an integer between {self.low} and {self.high}", field=where
            )
        return int(value)

    def schema(self) -> Schema:
        return {"type": "integer", "minimum": self.low, "maximum": self.high}


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number (not a boolean) parsed as a float; ``range_message`` when only the bounds fail."""

    message: str
    low: float | None = None
    high: float | None = None
    exclusive_low: bool = False
    range_message: str = ""

    def parse(self, value: Any, where: str) -> float:
        if not _is_number(value):
            raise ValidationError(self.message, field=where)
        low_ok = self.low is None or (value > self.low if self.exclusive_low else value >= self.low)
        if not low_ok or (self.high is not None and value > self.high):
            raise ValidationError(self.range_message or self.message, field=where)
        return float(value)

    def schema(self) -> Schema:
        out: Schema = {"type": "number"}
        if self.low is not None:
            out["exclusiveMinimum" if self.exclusive_low else "minimum"] = self.low
        if self.high is not None:
            out["maximum"] = self.high
        return out


@dataclass(frozen=True, slots=True)
class Boolean:
    message: str = "must be true or false"

    def parse(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise ValidationError(self.message, field=where)
        return value

    def schema(self) -> Schema:
        return {"type": "boolean"}


@dataclass(frozen=True, slots=True)
class Choice:
    options: tuple[str, ...]
    message: str = ""

    def parse(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in self.options:
            raise ValidationError(self.message or f"must be one of {', '.join(self.options)}", field=where)
        return value

    def schema(self) -> Schema:
        return {"type": "string", "enum": list(self.options)}


@dataclass(frozen=True, slots=True)
class Text:
    """A string, optionally matching ``pattern`` (``re.match``, as the parsers always did);
    ``no_nul`` refuses NUL too, which the document leaves unsaid (as for argv and env)."""

    message: str
    pattern: re.Pattern[str] | None = None
    no_nul: bool = False

    def parse(self, value: Any, where: str) -> str:
        if (
            not isinstance(value, str)
            or (self.pattern is not None and not self.pattern.match(value))
            or (self.no_nul and "\x00" in value)
        ):
            raise ValidationError(self.message, field=where)
        return value

    def schema(self) -> Schema:
        out: Schema = {"type": "string"}
        if self.pattern is not None:
            out["pattern"] = self.pattern.pattern
        return out


@dataclass(frozen=True, slots=True)
class StringList:
    """A list of non-empty strings."""

    message: str = "must be a list of non-empty strings"

    def parse(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValidationError(self.message, field=where)
        return list(value)

    def schema(self) -> Schema:
        return {"type": "array", "items": {"type": "string", "minLength": 1}}


@dataclass(frozen=True, slots=True)
class StringMap:
    message: str = "must be an object of string to string"

    def parse(self, value: Any, where: str) -> dict[str, str]:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValidationError(self.message, field=where)
        return dict(value)

    def schema(self) -> Schema:
        return {"type": "object", "additionalProperties": {"type": "string"}}


@dataclass(frozen=True, slots=True)
class Custom:
    """A parser whose rules JSON Schema states only in part: ``json_schema`` is hand-written beside it
    (a test checks its boundaries against the parser)."""

    parser: Callable[[Any, str], Any]
    json_schema: Schema

    def parse(self, value: Any, where: str) -> Any:
        return self.parser(value, where)

    def schema(self) -> Schema:
        return copy.deepcopy(self.json_schema)


@dataclass(frozen=True, slots=True)
class Nested:
    """An object described by another model; documented as a reference to its component."""

    model: Model[Any]

    def parse(self, value: Any, where: str) -> Any:
        return self.model.parse(value, where)

    def schema(self) -> Schema:
        return {"$ref": f"#/components/schemas/{self.model.name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or JSON null."""
    out = copy.deepcopy(schema)
    if isinstance(out.get("type"), str) and "$ref" not in out and "oneOf" not in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [out, {"type": "null"}]}


@dataclass(frozen=True, slots=True)
class Field:
    """One key of a body.

    ``nullable``: JSON null is as if the key were absent (a required key then is missing).
    ``when``: the key is read only if this holds for the values so far (else ignored, as before);
    ``when_schema`` says the same in JSON Schema, so that the document requires the key only then.
    ``check``: runs after this field with the values so far and the model's path, for rules that
    span fields.
    """

    name: str
    kind: Kind
    required: bool = False
    required_message: str = "is required"
    nullable: bool = False
    when: Callable[[Mapping[str, Any]], bool] | None = None
    when_schema: Schema | None = None
    check: Callable[[Mapping[str, Any], str], None] | None = None
    description: str = ""


def _list_allowed(unknown: list[str], allowed: list[str]) -> tuple[str, str]:
    return unknown[0], f"unknown key (allowed: {', '.join(allowed)})"


_MISSING = object()


@dataclass(frozen=True)
class Model(Generic[T]):
    """A JSON object parsed into the dataclass ``build``; ``name`` is its OpenAPI component."""

    name: str
    build: type[T]
    fields: tuple[Field, ...]
    # Which unknown key to name and how: (unknown keys in body order, allowed keys sorted) -> (key, message).
    unknown: Callable[[list[str], list[str]], tuple[str, str]] = _list_allowed
    example: Schema | None = None

    def defaults(self) -> dict[str, Any]:
        """The dataclass's default of every field that has one (factories called)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self.build):  # type: ignore[arg-type]
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out

    def parse(self, body: Any, where: str = "") -> T:
        """Validate ``body`` (at path ``where``; "" for a request body) into a ``build``."""
        if not isinstance(body, dict):
            message = "must be an object" if where else "request body must be a JSON object"
            raise ValidationError(message, field=where or "<body>")
        allowed = {f.name for f in self.fields}
        unknown = [key for key in body if key not in allowed]
        if unknown:
            key, message = self.unknown(unknown, sorted(allowed))
            raise ValidationError(message, field=_path(where, key))
        values = self.defaults()
        for f in self.fields:
            if f.when is None or f.when(values):
                value = body.get(f.name, _MISSING)
                if value is None and f.nullable:
                    value = _MISSING
                if value is not _MISSING:
                    values[f.name] = f.kind.parse(value, _path(where, f.name))
                elif f.required:
                    raise ValidationError(f.required_message, field=_path(where, f.name))
            if f.check is not None:
                f.check(values, where)
        return self.build(**values)

    def schema(self) -> Schema:
        """The request body's JSON Schema, from the same fields ``parse`` reads."""
        defaults = self.defaults()
        properties: Schema = {}
        for f in self.fields:
            schema = f.kind.schema()
            # A key required only sometimes (``when``) may be null: it is absent then.
            if f.nullable and (not f.required or f.when is not None):
                schema = nullable(schema)
            if _documentable(f, defaults.get(f.name, _MISSING)):
                schema["default"] = defaults[f.name]
            if f.description:
                schema["description"] = f.description
            properties[f.name] = schema
        out: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
        required = [f.name for f in self.fields if f.required and f.when is None]
        if required:
            out["required"] = required
        conditional = [
            {"if": f.when_schema, "then": _present(f)}
            for f in self.fields
            if f.required and f.when_schema is not None
        ]
        if conditional:
            out["allOf"] = conditional
        if self.example is not None:
            out["example"] = copy.deepcopy(self.example)
        return out


def _present(f: Field) -> Schema:
    """JSON Schema of ``f`` being there (null is absent for a nullable field)."""
    out: Schema = {"required": [f.name]}
    if f.nullable:
        out["properties"] = {f.name: {"not": {"type": "null"}}}
    return out


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _documentable(f: Field, default: Any) -> bool:
    """A default is documented when it is a JSON scalar the field itself accepts."""
    if default is _MISSING or default is None or not isinstance(default, str | int | float | bool):
        return False
    try:
        f.kind.parse(default, f.name)
    except ValidationError:
        return False
    return True
