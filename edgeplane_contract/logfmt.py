"""The log format of the hub and the agents: one record is one line, and no secret is in it.

* :class:`RedactSecrets`, a filter on the root handler, so it sees every record that is
  written, those of aiohttp, asyncio and nats-py included: it renders the message and the
  exception text and replaces edgeplane API and join tokens, nkey seeds, ``Bearer`` values and
  ``Authorization`` header values with ``[REDACTED]``. It matches what is left of a secret too,
  as a library may print a truncated one (aiohttp's "Got more than 8190 bytes" error quotes the
  start of an oversized header).
* :class:`OneLineFormatter` escapes control characters in the whole line (message, exception
  text, stack): ``\\n`` becomes ``\\\\n``, other C0/C1 controls ``\\\\xNN``. A request path
  with ``%0a`` can then never write a line that looks like another record.

:func:`configure_logging` installs both on stderr; ``controlplane up``/``serve`` and
``edge-agent run`` call it once at their entry points.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = [
    "LOG_FORMAT",
    "REDACTED",
    "OneLineFormatter",
    "RedactSecrets",
    "configure_logging",
    "escape_controls",
    "redact_secrets",
]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[REDACTED]"

_TOKEN = re.compile(r"\bep_(api|join)_([A-Za-z0-9_-]*)")
_TOKEN_ID = re.compile(r"[a-f0-9]{16}_")


def _token(match: re.Match[str]) -> str:
    # ep_<kind>_<id>_<secret>: the kind and the id say which token it was; the rest goes (all of
    # it when the id is not whole: a truncated or malformed token).
    rest = match.group(2)
    head = rest[:17] if _TOKEN_ID.match(rest) else ""
    return f"ep_{match.group(1)}_{head}{REDACTED}"


# Each pattern keeps what identifies the secret (its kind, a token's id) and replaces the rest.
_SECRETS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # An Authorization header's value, as a header line or in a repr'd mapping (to its end); a
    # Bearer value is the next pattern's, a placeholder (``<token>``) is no secret.
    (
        re.compile(r"""(?i)(authorization['"]?\s*+[:=]\s*+(?:(?-i:b)?['"])?+)(?!<|bearer\s)[^'"\r\n]+"""),
        r"\1" + REDACTED,
    ),
    # A bearer value anywhere, whatever its form (a token, a JWT, a truncated run).
    (re.compile(r"(?i)(\bbearer\s+)(?!<)[^\s'\"]+"), r"\1" + REDACTED),
    (_TOKEN, _token),
    # nkey seeds: S + the key's type + base32 (58 in all); a truncated one from 20 characters.
    (re.compile(r"\bS[UAONCX][A-Z2-7]{20,}"), REDACTED),
)

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (splitlines() breaks on
# them): each becomes a visible escape, so no byte of a record can start a new line.
_ESCAPES: dict[int, str] = {code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def redact_secrets(text: str) -> str:
    """``text`` with every token, seed, bearer and Authorization value replaced."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def escape_controls(text: str) -> str:
    """``text`` on one line: control characters as ``\\n``, ``\\r``, ``\\t`` or ``\\xNN``."""
    return text.translate(_ESCAPES)


class RedactSecrets(logging.Filter):
    """Redacts secrets from a record's message, exception text and stack (never drops one)."""

    _exceptions = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad %-template: let the handler report it as logging does
            return True
        record.msg, record.args = redact_secrets(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._exceptions.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secrets(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_secrets(record.stack_info)
        return True


class OneLineFormatter(logging.Formatter):
    """:data:`LOG_FORMAT` (or ``fmt``) with every control character escaped: one line per record."""

    def __init__(self, fmt: str = LOG_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record))


def configure_logging(level: str | int, *, stream: TextIO | None = None) -> logging.Handler:
    """The root logger writes to ``stream`` (stderr) at ``level`` (a name such as ``"INFO"`` or a
    number; an unknown name is INFO), one line per record, secrets redacted. Returns the handler.

    Like :func:`logging.basicConfig`, it leaves a root logger that has handlers already alone
    (an embedding program's, pytest's)."""
    if isinstance(level, str):
        level = getattr(logging, level.upper(), logging.INFO)
        if not isinstance(level, int):
            level = logging.INFO
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(OneLineFormatter())
    handler.addFilter(RedactSecrets())
    logging.basicConfig(level=level, handlers=[handler])
    return handler
