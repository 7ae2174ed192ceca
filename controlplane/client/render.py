"""Text for people: aligned tables, quantities (``512Mi``), ages (``3m``), and JSON/YAML output."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

__all__ = ["OUTPUTS", "age", "cpu", "dump", "memory", "percent", "table", "text"]

OUTPUTS = ("table", "json", "yaml")
_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, three spaces apart (as kubectl prints them)."""
    cells = [[str(h) for h in header]] + [[text(v) for v in row] for row in rows]
    widths = [max(len(row[c]) for row in cells) for c in range(len(header))]
    return "\n".join(
        "   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def text(value: Any) -> str:
    """A cell: ``-`` for nothing, lists comma-joined."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(text(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def memory(n_bytes: Any) -> str:
    """``536870912`` -> ``512Mi`` (binary units, one decimal where it is not whole)."""
    if not isinstance(n_bytes, int | float):
        return "-"
    for unit, size in _UNITS:
        if abs(n_bytes) >= size:
            value = n_bytes / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n_bytes:.0f}"


def cpu(cores: Any) -> str:
    return f"{cores:.3g}" if isinstance(cores, int | float) else "-"


def percent(part: Any, whole: Any) -> str:
    if not isinstance(part, int | float) or not isinstance(whole, int | float) or whole <= 0:
        return "-"
    return f"{100 * part / whole:.0f}%"


def age(iso_time: Any, now: datetime | None = None) -> str:
    """How long ago an API timestamp was: ``45s``, ``12m``, ``3h``, ``2d``."""
    if not isinstance(iso_time, str):
        return "-"
    try:
        then = datetime.fromisoformat(iso_time.replace("Z", "+00:00"))
    except ValueError:
        return iso_time
    seconds = max(0.0, ((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def dump(data: Any, output: str) -> str:
    """``data`` as JSON (indented) or YAML (block style, keys in the API's order)."""
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(data, indent=2)
