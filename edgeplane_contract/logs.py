"""Logs over NATS: the hub asks a node for a bounded chunk of one placement's or one function
instance's output (request/reply on ``<prefix>.<cluster>.node.<node>.logs``).

Offsets are *logical*: bytes since the log began, counting what the agent has since dropped to
keep the file under its size limit (``dropped``), so a follower's next offset stays valid across a
trim. ``data`` is UTF-8 text; bytes that are not UTF-8 arrive as U+FFFD, and a chunk never ends
inside a character (the rest of it comes with the next chunk).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from edgeplane_contract.codec import SCHEMA_VERSION

__all__ = ["LOG_ID", "LOG_SOURCES", "MAX_LOG_CHUNK", "MAX_TAIL_LINES", "LogChunkV1", "LogRequestV1"]

LOG_SOURCES = ("placement", "function")
# Placement ids are the hub's uuid4 hex, instance ids a prefix of one: nothing that walks a path.
LOG_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_LOG_CHUNK = 256 * 1024
MAX_TAIL_LINES = 100_000


@dataclass(slots=True)
class LogRequestV1:
    """Up to ``max_bytes`` of a log from ``offset``; with ``tail_lines``, its last lines instead."""

    TYPE: ClassVar[str] = "log_request"
    request_id: str
    source: str  # placement | function
    id: str
    offset: int = 0
    max_bytes: int = 64 * 1024
    tail_lines: int | None = None
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class LogChunkV1:
    """One chunk: ``data`` covers logical bytes [offset, next_offset); ``size`` is the log's
    logical size now and ``dropped`` how many of its first bytes are gone (trimmed or expired).
    ``found`` is false when the node has no such log (never had, or deleted by retention)."""

    TYPE: ClassVar[str] = "log_chunk"
    request_id: str
    found: bool
    data: str = ""
    offset: int = 0
    next_offset: int = 0
    size: int = 0
    dropped: int = 0
    v: int = SCHEMA_VERSION
