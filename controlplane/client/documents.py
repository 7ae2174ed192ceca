"""Workload and function documents from YAML or JSON files, for ``controlplane apply``.

A file holds one document or many (YAML ``---`` separated, or a JSON/YAML list). Which API a
document goes to:

- ``kind: Function`` or ``kind: Workload`` (any case) says so, and is removed from the body;
- otherwise its shape: ``source``, ``handler``, ``runtime`` or ``path`` make a function (those
  keys are the function API's own), anything else is a workload. A workload's own ``kind``
  (``batch``, ``service``, ``analytics``, ``inference``) stays in its body.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = ["FUNCTION_KEYS", "Document", "DocumentError", "classify", "load_documents"]

Kind = Literal["workload", "function"]
FUNCTION_KEYS = frozenset({"source", "handler", "runtime", "path"})
_KIND_NAMES: dict[str, Kind] = {"function": "function", "workload": "workload"}


class DocumentError(Exception):
    """A file that cannot be read or a document that is not a mapping; names the file."""


@dataclass(frozen=True, slots=True)
class Document:
    kind: Kind
    body: dict[str, Any]
    origin: str  # "file.yaml#2": where it came from, for messages

    @property
    def name(self) -> str:
        return str(self.body.get("name", "?"))


def classify(document: dict[str, Any]) -> tuple[Kind, dict[str, Any]]:
    """The API the document goes to, and its body for that API."""
    body = dict(document)
    declared = body.get("kind")
    if isinstance(declared, str) and declared.lower() in _KIND_NAMES:
        del body["kind"]
        return _KIND_NAMES[declared.lower()], body
    return ("function" if FUNCTION_KEYS & body.keys() else "workload"), body


def load_documents(paths: list[str]) -> list[Document]:
    """Every document of every file (``-`` is standard input), in order; DocumentError names the
    first file or document that is wrong, before anything is sent."""
    out: list[Document] = []
    for path in paths:
        text = _read(path)
        try:
            loaded = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:  # JSON is YAML: one parser reads both
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise DocumentError(
                f"{path}: not valid YAML or JSON{where}: {getattr(exc, 'problem', exc)}"
            ) from None
        flat = [item for d in loaded for item in (d if isinstance(d, list) else [d])]
        if not flat:
            raise DocumentError(f"{path}: no documents")
        for index, document in enumerate(flat, start=1):
            origin = f"{path}#{index}" if len(flat) > 1 else path
            if not isinstance(document, dict):
                raise DocumentError(f"{origin}: a document must be a mapping, got {type(document).__name__}")
            kind, body = classify(document)
            out.append(Document(kind, _plain(body), origin))
    return out


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _plain(body: dict[str, Any]) -> dict[str, Any]:
    """As JSON would carry it: YAML dates and the like become strings, so the API judges them."""
    return dict(json.loads(json.dumps(body, default=str)))
