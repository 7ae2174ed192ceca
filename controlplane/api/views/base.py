"""What the response models share: ISO 8601 timestamps, enums, and the one serialiser."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, overload

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["DateTime", "OptionalDateTime", "iso", "one_of", "to_json"]

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


def to_json(view: DataclassInstance) -> dict[str, Any]:
    """A response model as its JSON object: every field, in declaration order."""
    return dataclasses.asdict(view)
