"""The errors both sides raise: the base of every expected, user-facing error, invalid input and
invalid configuration.

Each error carries a machine-readable ``code`` and, where it concerns one input, the ``field``
that was wrong; the hub's HTTP layer maps them to status codes and a JSON body. The hub's own
errors (not found, conflict, unauthorized, ...) derive from :class:`EdgeplaneError` in
``controlplane.errors``.
"""

from __future__ import annotations

__all__ = ["ConfigError", "EdgeplaneError", "ValidationError"]


class EdgeplaneError(Exception):
    """Base class of every expected, user-facing error."""

    code = "internal"
    http_status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        # Extra HTTP response headers (WWW-Authenticate, Retry-After, ...).
        self.headers: dict[str, str] = {}

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "field": self.field}


class ValidationError(EdgeplaneError):
    """A request body, query parameter or message field is invalid."""

    code = "invalid"
    http_status = 422


class ConfigError(EdgeplaneError):
    """A configuration file is invalid; names the file, the key and the reason."""

    code = "config"

    def __init__(self, path: str, key: str, reason: str) -> None:
        super().__init__(f"{path}: {key}: {reason}", field=key)
        self.path = path
        self.key = key
        self.reason = reason
