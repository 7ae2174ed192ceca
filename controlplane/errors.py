"""Domain errors shared by the hub's subsystems.

Each error carries a machine-readable ``code`` and, where it concerns one input, the ``field``
that was wrong; the HTTP layer maps them to status codes and a JSON body. The base class and the
errors the agent raises too (:class:`ValidationError`, :class:`ConfigError`) are the contract's
(``edgeplane_contract.errors``); the hub's modules import all of them from here.
"""

from __future__ import annotations

from edgeplane_contract.errors import ConfigError, EdgeplaneError, ValidationError

__all__ = [
    "BadRequestError",
    "ConfigError",
    "ConflictError",
    "EdgeplaneError",
    "ForbiddenError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "UnauthorizedError",
    "UnsupportedMediaTypeError",
    "ValidationError",
]


class BadRequestError(EdgeplaneError):
    """The request could not be parsed at all (not JSON, not UTF-8)."""

    code = "bad_json"
    http_status = 400


class NotFoundError(EdgeplaneError):
    code = "not_found"
    http_status = 404


class ConflictError(EdgeplaneError):
    code = "conflict"
    http_status = 409


class UnauthorizedError(EdgeplaneError):
    """No credentials, or credentials that are unknown, expired or revoked."""

    code = "unauthorized"
    http_status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, field="Authorization")
        self.headers["WWW-Authenticate"] = 'Bearer realm="edgeplane"'


class ForbiddenError(EdgeplaneError):
    """Valid credentials without the scope the operation needs."""

    code = "forbidden"
    http_status = 403


class PayloadTooLargeError(EdgeplaneError):
    """A body, or the message it would become, is larger than the hub accepts or NATS can carry."""

    code = "too_large"
    http_status = 413


class UnsupportedMediaTypeError(EdgeplaneError):
    code = "unsupported_media_type"
    http_status = 415


class RateLimitedError(EdgeplaneError):
    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.headers["Retry-After"] = str(retry_after_s)


class StartupError(Exception):
    """The hub cannot start (the store cannot be opened, the API port is taken): one line for the
    operator, no traceback."""
