"""Domain errors shared by the hub's subsystems.

Each error carries a machine-readable ``code`` and, where it concerns one input, the ``field``
that was wrong; the HTTP layer maps them to status codes and a JSON body. The base class and the
errors the agent raises too (:class:`ValidationError`, :class:`ConfigError`) are the contract's
(``edgeplane_contract.errors``); the hub's modules import all of them from here.
"""

from __future__ import annotations

from typing import Any

from edgeplane_contract.errors import ConfigError, EdgeplaneError, ValidationError

__all__ = [
    "BadRequestError",
    "ConfigError",
    "ConflictError",
    "EdgeplaneError",
    "ForbiddenError",
    "InvocationFailedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "RateLimitedError",
    "StoreUnavailableError",
    "UnauthorizedError",
    "UnavailableError",
    "UnsupportedMediaTypeError",
    "ValidationError",
    "error_body",
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


class UnavailableError(EdgeplaneError):
    """Something the hub asks on the caller's behalf (a node) did not answer."""

    code = "unavailable"
    http_status = 503


class LeaderLostError(UnavailableError):
    """A standby forwarded the request and the leading hub went away before it answered: unlike a
    plain ``unavailable`` (nothing reached a leader), the request may have been carried out, so a
    client retries it with the same ``Idempotency-Key`` (the API then answers the first outcome)
    or reads what it would have changed."""

    code = "leader_lost"


class StoreUnavailableError(UnavailableError):
    """The store cannot be reached or cannot write now (database down, disk full, locked past its
    timeout): the request did nothing lasting, and the same request later may succeed."""

    RETRY_AFTER_S = 2

    def __init__(self, reason: str) -> None:
        super().__init__(f"the store is unavailable: {reason}")
        self.reason = reason
        self.headers["Retry-After"] = str(self.RETRY_AFTER_S)


class InvocationFailedError(EdgeplaneError):
    """A function invocation that failed, as the service recorded it (``{"code", "message",
    ...}``): its own code, what else it said (type, traceback) beside the message, and the
    invocation's id beside the error. The status says whose fault: the handler, its result or its
    instance 502; nothing could run it 503; out of time 504; an event too large for NATS 413."""

    STATUS_BY_CODE = {
        "no_capacity": 503,
        "capacity": 503,
        "unavailable": 503,
        "not_started": 503,  # handed to no worker on its node: it ran nowhere, a retry runs it
        "timeout": 504,
        "too_large": 413,
    }

    def __init__(self, error: dict[str, Any], *, invocation_id: str, headers: dict[str, str]) -> None:
        details = dict(error)
        code = str(details.pop("code", "function_error"))
        super().__init__(details.pop("message", ""))
        self.code = code
        self.http_status = self.STATUS_BY_CODE.get(code, 502)
        self.details = details
        self.invocation_id = invocation_id
        self.headers.update(headers)

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), **self.details}


def error_body(error: EdgeplaneError) -> dict[str, object]:
    """The API's JSON body of an error: ``{"error": {"code", "message", "field", ...}}``, and the
    invocation's id beside it for an invocation that failed."""
    body: dict[str, object] = {"error": error.to_dict()}
    if isinstance(error, InvocationFailedError):
        body["invocation_id"] = error.invocation_id
    return body


class StartupError(EdgeplaneError):
    """The hub cannot start (the store cannot be opened, the API port is taken): one line for the
    operator, no traceback."""
