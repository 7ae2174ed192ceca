"""Bearer and join tokens: generation, hashing, scopes, lifetimes.

A token is ``ep_<kind>_<id>_<secret>``: ``id`` finds the row, the whole token is hashed with
SHA-256 and compared in constant time. Tokens carry 256 bits of randomness, so a fast hash is
enough (there is no password to brute-force); the store never holds a token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = [
    "SCOPES",
    "Principal",
    "hash_token",
    "new_token",
    "parse_scopes",
    "parse_ttl",
    "token_id",
    "tokens_equal",
]

# What each scope allows; ``admin`` implies all of them (and sees secrets in clear).
SCOPES: dict[str, str] = {
    "read": "GET any resource",
    "workloads": "create and delete workloads",
    "functions": "register, delete and invoke functions; see function tracebacks",
    "nodes": "enrol and revoke nodes",
    "admin": "everything, including tokens and secrets in clear",
}

_TOKEN_RE = re.compile(r"^ep_(api|join)_([a-f0-9]{16})_([A-Za-z0-9_-]{20,100})$")
_TTL_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: the token's id and name, and what it may do."""

    token_id: str
    name: str
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


def new_token(kind: str) -> tuple[str, str]:
    """A fresh ``(id, token)`` of ``kind`` ``api`` or ``join``."""
    ident = secrets.token_hex(8)
    return ident, f"ep_{kind}_{ident}_{secrets.token_urlsafe(32)}"


def token_id(token: str, kind: str) -> str | None:
    """The id inside a well-formed token of ``kind``, or None."""
    match = _TOKEN_RE.match(token.strip())
    if match is None or match.group(1) != kind:
        return None
    return match.group(2)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


def tokens_equal(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), stored_hash)


def parse_scopes(raw: str | list[str]) -> list[str]:
    """Scopes from ``"read,workloads"`` or a list; ValueError names the unknown one."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    scopes = sorted({s.strip() for s in items if s.strip()})
    if not scopes:
        raise ValueError(f"at least one scope is needed; known: {', '.join(SCOPES)}")
    for scope in scopes:
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    return scopes


def parse_ttl(raw: str | None) -> float | None:
    """Seconds from ``90``, ``30m``, ``12h``, ``7d``; None for no expiry; ValueError otherwise."""
    if raw is None or raw in ("", "0", "never"):
        return None
    match = _TTL_RE.match(raw.strip())
    if match is None:
        raise ValueError(f"bad duration {raw!r}: use e.g. 90s, 30m, 12h or 7d")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not 0 < seconds <= 10 * 365 * 86400:
        raise ValueError(f"duration {raw!r} out of range (more than 0, at most 10 years)")
    return seconds
