"""Decoding of plugin args (a mapping from a profile) into typed args dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["decode_args"]

T = TypeVar("T")


def decode_args(cls: type[T], raw: Mapping[str, Any] | None, plugin: str) -> T:
    """Build ``cls`` from ``raw``; unknown keys and wrong types raise ValueError naming the plugin."""
    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{plugin}: args must be a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        f = fields.get(key)
        if f is None:
            raise ValueError(f"{plugin}: unknown arg {key!r} (allowed: {', '.join(sorted(fields))})")
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else f.default_factory()  # type: ignore[misc]
            if f.default_factory is not dataclasses.MISSING
            else None
        )
        values[key] = _coerce(value, default, f"{plugin}.{key}")
    return cls(**values)


def _coerce(value: Any, default: Any, where: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: must be true or false")
        return value
    if isinstance(default, int | float) and not isinstance(default, bool):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: must be a number")
        return type(default)(value)
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: must be a list")
        return tuple(value)
    if isinstance(default, dict):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: must be a mapping")
        return dict(value)
    return value
