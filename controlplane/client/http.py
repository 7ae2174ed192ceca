"""One JSON call to the hub's API (urllib: a one-shot command needs no event loop).

Every call has a timeout; redirects are refused, so the bearer token never follows one to
another host; nothing here prints or raises anything that holds the token.
"""

from __future__ import annotations

import json
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from controlplane.client.config import ClientConfig

__all__ = ["DEFAULT_TIMEOUT_S", "ApiError", "ClientError", "HubClient", "HubUnreachableError", "Reply"]

DEFAULT_TIMEOUT_S = 30.0


class ClientError(Exception):
    """A call that did not succeed; its message is one line for the user."""


class HubUnreachableError(ClientError):
    """No answer from the hub (refused, name not found, TLS failure, timeout)."""


class ApiError(ClientError):
    """The hub answered with an error: its JSON body's ``code``, ``message`` and ``field``."""

    def __init__(self, status: int, code: str, message: str, field: str | None, body: Any) -> None:
        self.status, self.code, self.message, self.field, self.body = status, code, message, field, body
        where = f" (field: {field})" if field else ""
        super().__init__(f"{message}{where} [HTTP {status} {code}]")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None  # urllib then raises the 3xx as an HTTPError: reported, never followed


class HubClient:
    """Calls to one hub with one token; ``verbose`` logs each call (method, URL, status, time)."""

    def __init__(self, config: ClientConfig, *, timeout_s: float = DEFAULT_TIMEOUT_S, verbose: bool = False):
        self.config = config
        self.timeout_s = timeout_s
        self.verbose = verbose
        handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
        if config.url.startswith("https:"):
            context = ssl.create_default_context(cafile=config.ca_file) if config.ca_file else None
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def get(self, path: str, query: dict[str, Any] | None = None) -> Any:
        return self.call("GET", path, query=query).body

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        send_body: bool = False,
        timeout_s: float | None = None,
    ) -> Reply:
        """The answer to one call; raises ApiError (4xx/5xx) or HubUnreachableError."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None or send_body:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        timeout = timeout_s or self.timeout_s
        response = self._open(method, path, query, headers, data, timeout)
        try:
            with response:
                return Reply(response.status, _json(response.read()), dict(response.headers.items()))
        except OSError as exc:  # the answer broke off, or stalled past the timeout
            raise self._unreachable(exc, timeout) from None

    def stream(self, path: str, query: dict[str, Any], *, timeout_s: float | None) -> Iterator[bytes]:
        """A GET's body as it arrives (logs); ``timeout_s`` None waits as long as the hub streams."""
        response = self._open("GET", path, query, {}, None, timeout_s)
        with response:
            while chunk := response.read1(65536):
                yield chunk

    def _open(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None,
        headers: dict[str, str],
        data: bytes | None,
        timeout: float | None,
    ) -> Any:
        """The hub's response, its body not read yet; ApiError or HubUnreachableError."""
        url = self.config.url + urllib.parse.quote(path)
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"Authorization": f"Bearer {self.config.token}", **headers}
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        started = time.monotonic()
        try:
            response = self._opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            self._log(method, url, exc.code, started)
            raise _api_error(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            self._log(method, url, None, started)
            raise self._unreachable(exc, timeout) from None
        self._log(method, url, response.status, started)
        return response

    def _unreachable(self, exc: BaseException, timeout: float | None) -> HubUnreachableError:
        return HubUnreachableError(f"cannot reach the hub at {self.config.url}: {_reason(exc, timeout or 0)}")

    def _log(self, method: str, url: str, status: int | None, started: float) -> None:
        if self.verbose:  # never the headers: they hold the token
            took = (time.monotonic() - started) * 1000
            print(f"{method} {url} -> {status or 'no answer'} ({took:.0f} ms)", file=sys.stderr)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _api_error(status: int, raw: bytes) -> ApiError:
    body = _json(raw)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return ApiError(
            status, str(error.get("code", "error")), str(error.get("message", "")), error.get("field"), body
        )
    # Not the hub's JSON (a proxy, a redirect): say what came back, briefly.
    text = body if isinstance(body, str) else json.dumps(body)
    return ApiError(status, "http_error", (text or "").strip()[:200] or "no error body", None, body)


def _reason(exc: BaseException, timeout: float) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the hub running?)"
    if isinstance(reason, ssl.SSLError):
        return f"TLS: {reason.reason or reason}"
    return str(getattr(reason, "strerror", None) or reason)
