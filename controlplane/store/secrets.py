"""``env`` values encrypted at rest, with a key the store never holds.

As Kubernetes' ``EncryptionConfiguration`` (provider ``aesgcm``) does for Secrets: each value of a
workload's or function's ``env`` is stored as ``enc:v1:<base64 of nonce + AES-256-GCM ciphertext>``;
the key lives in a file of its own (``<data-dir>/secrets.key``, mode 0600, made at first start),
so that a copied database alone gives no secret away. Values written by older versions (plain
strings) still read as they are, and are sealed the next time their row is written.

It is done in one place: the ``spec`` columns of workloads and functions have the type
:class:`SealedSpec`, which seals ``env`` on the way into the database and opens it on the way out
(once per row load; nothing above the store sees a sealed value). The cipher belongs to one
engine (:func:`attach_cipher`), not to the process: an engine without one reads and writes as
before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import JSON
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import TypeDecorator

from edgeplane_contract.errors import ConfigError, EdgeplaneError

__all__ = [
    "PREFIX",
    "EnvCipher",
    "SealedSpec",
    "SecretsKeyError",
    "attach_cipher",
    "cipher_of",
    "load_env_cipher",
]

PREFIX = "enc:v1:"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's standard nonce; random per value (2^-32 collision bound is far off)
_DIALECT_ATTR = "edgeplane_env_cipher"


class SecretsKeyError(EdgeplaneError, RuntimeError):
    """A sealed value cannot be opened: the key is not the one it was sealed with (or it was
    altered). Never carries the value."""

    code = "secrets_key"


class EnvCipher:
    """Seals and opens ``env`` values with one AES-256-GCM key."""

    __slots__ = ("_aead", "_key", "source")

    def __init__(self, key: bytes, *, source: str = "<key>") -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"the key must be {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self._key = key
        self.source = source

    def __repr__(self) -> str:  # never the key
        return f"EnvCipher(source={self.source!r})"

    def derive(self, label: str) -> bytes:
        """A 32-byte key for another purpose (``label``), from this one: HMAC-SHA256(key, label).
        Replicas that share the secrets key share each derived key; the key itself never leaves."""
        return hmac.new(self._key, label.encode("utf-8"), hashlib.sha256).digest()

    def seal(self, value: str) -> str:
        """``enc:v1:...`` for ``value``; a value sealed already is kept as it is."""
        if value.startswith(PREFIX):
            return value
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, value.encode("utf-8"), None)
        return PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, value: str) -> str:
        """The plain value of a sealed one; a plain value (an older version's) as it is."""
        if not value.startswith(PREFIX):
            return value
        try:
            raw = base64.b64decode(value[len(PREFIX) :], validate=True)
            plain = self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], None)
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretsKeyError(
                f"an env value in the store cannot be decrypted with {self.source}: "
                "it was sealed with another key (or altered)"
            ) from None
        return plain.decode("utf-8")

    def seal_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``spec`` with its ``env`` values sealed (``spec`` itself is not changed)."""
        env = spec.get("env")
        if not isinstance(env, dict) or not env:
            return spec
        return {**spec, "env": {k: self.seal(v) if isinstance(v, str) else v for k, v in env.items()}}

    def open_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """``spec`` with its ``env`` values opened (a new dict where any was sealed)."""
        env = spec.get("env")
        if not isinstance(env, dict) or not any(
            isinstance(v, str) and v.startswith(PREFIX) for v in env.values()
        ):
            return spec  # nothing sealed (an engine-less write, an older version's): as it is
        return {**spec, "env": {k: self.open(v) if isinstance(v, str) else v for k, v in env.items()}}


def load_env_cipher(path: Path, *, create: bool = True) -> EnvCipher:
    """The cipher of the key in ``path``; a new random key is written there (0600) when the file
    does not exist and ``create``. ConfigError (file, reason) when it is unreadable, malformed or
    readable by others."""
    source = str(path)
    if not path.exists():
        if not create:
            raise ConfigError(source, "<file>", "no such secrets key file")
        key = AESGCM.generate_key(bit_length=KEY_BYTES * 8)
        _write_new(path, base64.b64encode(key).decode("ascii") + "\n")
        return EnvCipher(key, source=source)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(source, "<file>", f"cannot read the secrets key: {reason}") from None
    if mode & 0o077:
        raise ConfigError(source, "<file>", "holds the secrets key but others may read it: chmod 600 it")
    try:
        key = base64.b64decode(text, validate=True)
    except binascii.Error:
        key = b""
    if len(key) != KEY_BYTES:
        raise ConfigError(source, "<file>", f"not a secrets key (base64 of {KEY_BYTES} random bytes)")
    return EnvCipher(key, source=source)


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` with ``text``, mode 0600; never over an existing file (two hubs starting
    at once: the second one fails rather than replacing the key the first one sealed with)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(text)


def attach_cipher(engine: AsyncEngine, cipher: EnvCipher | None) -> None:
    """Make ``engine`` seal and open ``env`` values with ``cipher`` (None: plain, as before)."""
    setattr(engine.sync_engine.dialect, _DIALECT_ATTR, cipher)


def cipher_of(dialect: Dialect) -> EnvCipher | None:
    """The cipher attached to the engine of ``dialect``, if any."""
    cipher = getattr(dialect, _DIALECT_ATTR, None)
    return cipher if isinstance(cipher, EnvCipher) else None


class SealedSpec(TypeDecorator[dict[str, Any]]):
    """A JSON spec column whose ``env`` values are sealed in the database (see the module)."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: dict[str, Any] | None, dialect: Dialect) -> dict[str, Any] | None:
        cipher = cipher_of(dialect)
        if cipher is None or not isinstance(value, dict):
            return value
        return cipher.seal_spec(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> dict[str, Any] | None:
        cipher = cipher_of(dialect)
        if cipher is None or not isinstance(value, dict):
            return value  # type: ignore[no-any-return]
        return cipher.open_spec(value)
