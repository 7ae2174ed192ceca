"""JSON Schema of a value from its Python type: what ``json.dumps(asdict(...))`` writes of a
dataclass or TypedDict (the stored specs, the API's response models in ``controlplane/api/views``).

``Annotated[..., {...}]`` adds keywords the type cannot say (enum, format, description); request
bodies are described by the field models of :mod:`controlplane.schema` instead.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from controlplane.schema import Schema, nullable

__all__ = ["JSON_NAME", "StoredAs", "type_schema"]

# A dataclass field's metadata key for its JSON name when it differs from the attribute's
# (``continue`` is a Python keyword); the API's to_json writes that name.
JSON_NAME = "json_name"


@dataclass(frozen=True, slots=True)
class StoredAs:
    """``Annotated`` metadata for a dict that ``asdict`` made of a ``tp`` and that is kept as it was
    stored: :func:`type_schema` documents it as ``tp``."""

    tp: Any


def type_schema(tp: Any, components: Mapping[Any, str] | None = None) -> Schema:
    """JSON Schema of a value of type ``tp`` as ``json.dumps(asdict(...))`` writes it: str, int,
    float, bool, None, Any, unions, list, dict, Literal, dataclasses and TypedDicts.

    Every key of a TypedDict is required unless NotRequired; every field of a dataclass without a
    default (asdict writes them all, but a dict stored by an older version may lack a field added
    since with a default). ``Annotated`` metadata dicts are merged in; a :class:`StoredAs` stands
    for the type it names. A dataclass or TypedDict nested in ``tp`` and named in ``components``
    is a ``$ref`` to that component."""
    return _type_schema(tp, components or {}, nested=False)


def _type_schema(tp: Any, components: Mapping[Any, str], *, nested: bool) -> Schema:
    def inner(t: Any) -> Schema:
        return _type_schema(t, components, nested=True)

    origin = get_origin(tp)
    if origin in (Required, NotRequired):  # presence: read with the TypedDict's keys below
        return _type_schema(get_args(tp)[0], components, nested=nested)
    if origin is Annotated:
        base, *extras = get_args(tp)
        stored_as = [extra.tp for extra in extras if isinstance(extra, StoredAs)]
        out = inner(stored_as[0]) if stored_as else _type_schema(base, components, nested=nested)
        for extra in extras:
            if isinstance(extra, dict):
                out.update(copy.deepcopy(extra))
        return out
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if tp in simple:
        return {"type": simple[tp]}
    if origin is Literal:
        values = list(get_args(tp))
        kinds = {simple.get(type(v)) for v in values}
        return (
            {"type": kinds.pop(), "enum": values}
            if len(kinds) == 1 and None not in kinds
            else {"enum": values}
        )
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        schema = inner(options[0]) if len(options) == 1 else {"anyOf": [inner(a) for a in options]}
        return nullable(schema) if len(options) < len(get_args(tp)) else schema
    if origin is list:
        return {"type": "array", "items": inner(get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": inner(get_args(tp)[1])}
    if dataclasses.is_dataclass(tp) or (isinstance(tp, type) and hasattr(tp, "__required_keys__")):
        if nested and tp in components:
            return {"$ref": f"#/components/schemas/{components[tp]}"}
        hints = get_type_hints(tp, include_extras=True)
        names = {k: k for k in hints}
        if dataclasses.is_dataclass(tp):
            names.update(
                {f.name: f.metadata[JSON_NAME] for f in dataclasses.fields(tp) if JSON_NAME in f.metadata}
            )
        schema = {"type": "object", "properties": {names[k]: inner(v) for k, v in hints.items()}}
        if dataclasses.is_dataclass(tp):
            required = [
                names[f.name]
                for f in dataclasses.fields(tp)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
        else:
            # Under postponed annotations (strings) the class cannot see (Not)Required itself.
            keys = tp.__required_keys__
            required = sorted(
                k
                for k, v in hints.items()
                if get_origin(v) is Required or (k in keys and get_origin(v) is not NotRequired)
            )
        if required:
            schema["required"] = required
        return schema
    raise TypeError(f"no JSON Schema for {tp!r}")
