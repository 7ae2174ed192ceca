"""NATS credentials on disk: nkey seeds in private files, and the client side of TLS.

A seed is the private half of an nkey; only its public key ever leaves the machine that made it.
Files holding one are written atomically with mode 0600.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import nkeys

from edgeplane_contract.errors import ConfigError

__all__ = [
    "NatsTls",
    "ensure_seed",
    "new_user_seed",
    "public_key_of",
    "read_seed",
    "write_private",
]


def new_user_seed() -> str:
    """A fresh nkey user seed (``SU...``)."""
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def public_key_of(seed: str) -> str:
    """The user public key (``U...``) of a seed; ValueError when it is not a user seed."""
    try:
        keypair = nkeys.from_seed(bytearray(seed.strip().encode()))
        public = keypair.public_key.decode()
    except Exception as exc:  # nkeys raises its own error types, and binascii/nacl ones
        raise ValueError(f"not an nkey seed: {type(exc).__name__}") from None
    if not public.startswith("U"):
        raise ValueError("not a user seed (its public key does not start with U)")
    return public


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o600)  # O_CREAT's mode does not apply to a file left over from a crash
    os.replace(tmp, path)


def read_seed(path: Path) -> str:
    """A seed file's seed; ConfigError (file, key, reason) when missing, unreadable or not a seed."""
    try:
        seed = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"cannot read the NATS seed: {exc.strerror or exc}") from None
    try:
        public_key_of(seed)
    except ValueError as exc:
        raise ConfigError(str(path), "<file>", str(exc)) from None
    return seed


def ensure_seed(path: Path) -> str:
    """The seed in ``path``, made (0600) on first use: the hub's identity on its embedded server."""
    if path.exists():
        return read_seed(path)
    seed = new_user_seed()
    write_private(path, seed + "\n")
    return seed


@dataclass(frozen=True, slots=True)
class NatsTls:
    """A NATS client's TLS files: the CA that signed the server, and an optional client certificate."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def context(self) -> ssl.SSLContext:
        """The client context; ConfigError names the file that cannot be loaded."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if self.ca_file:
                context.load_verify_locations(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(self.ca_file, "--nats-ca", f"cannot load: {exc}") from None
        try:
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(self.cert_file, "--nats-cert/--nats-key", f"cannot load: {exc}") from None
        return context

    @staticmethod
    def from_options(ca: str | None, cert: str | None, key: str | None) -> NatsTls | None:
        """From ``--nats-ca/--nats-cert/--nats-key``; None when none is given; checked at once."""
        if not (ca or cert or key):
            return None
        if bool(cert) != bool(key):
            missing = "--nats-key" if cert else "--nats-cert"
            raise ConfigError("<command line>", missing, "--nats-cert and --nats-key go together")
        tls = NatsTls(ca_file=ca or "", cert_file=cert or "", key_file=key or "")
        tls.context()  # fail at start, not at the first connection
        return tls
