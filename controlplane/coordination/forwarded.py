"""Who a standby forwarded a request for, in a form the leader can trust.

A standby forwards the API to the leader (:mod:`.standby_site`), so the leader sees the
standby's address, not the client's: per-address limits (``POST /v1/join``'s attempts) would
count per standby. ``X-Forwarded-For`` cannot be trusted (any client can send it), so a standby
also sends ``X-Edgeplane-Forwarded-For: <client>;<unix time>;<hmac>``, the HMAC-SHA256 of the
client, the time, the method and the path under a key every replica derives from the store's
shared secrets key (replicas must share it already). The leader takes the client from it only
when the HMAC matches and the time is within :data:`MAX_AGE_S` of its own clock; otherwise the
header is ignored and the peer's address counts.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["HEADER", "MAX_AGE_S", "forwarded_client", "forwarded_header"]

HEADER = "X-Edgeplane-Forwarded-For"
MAX_AGE_S = 30.0
#: What the forwarding key is derived for (``EnvCipher.derive``): never the sealing key itself.
KEY_LABEL = "edgeplane/forwarded-for/v1"


def _mac(key: bytes, client: str, at: int, method: str, path: str) -> str:
    message = f"{client}\n{at}\n{method.upper()}\n{path}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def forwarded_header(key: bytes, client: str, method: str, path: str, *, now: float | None = None) -> str:
    """The header value a standby adds for ``client`` (an address without ``;``)."""
    at = int(time.time() if now is None else now)
    return f"{client};{at};{_mac(key, client, at, method, path)}"


def forwarded_client(
    key: bytes | None, value: str | None, method: str, path: str, *, now: float | None = None
) -> str | None:
    """The client a valid header names, else None (no key, no header, a bad or stale MAC)."""
    if not key or not value:
        return None
    parts = value.split(";")
    if len(parts) != 3:
        return None
    client, at_text, mac = parts
    try:
        at = int(at_text)
    except ValueError:
        return None
    current = time.time() if now is None else now
    if not client or abs(current - at) > MAX_AGE_S:
        return None
    if not hmac.compare_digest(mac, _mac(key, client, at, method, path)):
        return None
    return client
