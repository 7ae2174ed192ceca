"""What the response models share: ISO 8601 timestamps, enums, and the one serialiser."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, overload

from controlplane.typeschema import JSON_NAME

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["DateTime", "OptionalDateTime", "iso", "json_name", "one_of", "to_json"]

# Documented as JSON Schema's date-time; iso() writes them.
DateTime = Annotated[str, {"format": "date-time"}]
OptionalDateTime = Annotated[str | None, {"format": "date-time"}]


def one_of(options: tuple[str, ...]) -> dict[str, Any]:
    """``Annotated`` metadata: the string is one of ``options`` (the store keeps statuses as str)."""
    return {"enum": list(options)}


@overload
def iso(ts: float) -> str: ...


@overload
def iso(ts: float | None) -> str | None: ...


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_name(name: str) -> Any:
    """A field whose JSON key is ``name`` (one Python cannot spell, e.g. ``continue``):
    ``field: T = json_name("continue")``. Top-level fields of a response model only."""
    return dataclasses.field(metadata={JSON_NAME: name})


def to_json(view: DataclassInstance) -> dict[str, Any]:
    """A response model as its JSON object: every field, in declaration order."""
    out = dataclasses.asdict(view)
    renamed = {f.name: f.metadata[JSON_NAME] for f in dataclasses.fields(view) if JSON_NAME in f.metadata}
    if not renamed:
        return out
    return {renamed.get(key, key): value for key, value in out.items()}
