"""Policy versions signed by the hub's nkey, verified by agents with the hub's public key.

What is signed is one line naming the version and both files' checksums and sizes, so that a
node takes a model only when the hub that enrolled it chose that exact model, whoever carries
the bytes (a site's leaf server, a replayed message). The signature is Ed25519 (what nkeys are).
"""

from __future__ import annotations

import base64
import binascii

import nacl.exceptions
import nacl.signing
import nkeys

__all__ = ["SignatureError", "sign_policy", "signed_text", "verify_policy"]


class SignatureError(ValueError):
    """The signature is missing, malformed or not the hub's."""


def signed_text(
    version: int, model_sha256: str, model_size: int, metadata_sha256: str, metadata_size: int
) -> bytes:
    return (
        f"edgeplane-policy/1 version={version} model={model_sha256}:{model_size} "
        f"metadata={metadata_sha256}:{metadata_size}"
    ).encode()


def sign_policy(seed: str, text: bytes) -> str:
    """The hub's signature of ``text`` (base64)."""
    return base64.b64encode(nkeys.from_seed(seed.encode()).sign(text)).decode()


def _verify_key(public_key: str) -> nacl.signing.VerifyKey:
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except (binascii.Error, ValueError):
        raise SignatureError("the hub's public key is not an nkey") from None
    body, checksum = raw[:-2], raw[-2:]
    if len(body) != 33 or body[0] != nkeys.PREFIX_BYTE_USER or nkeys.crc16_checksum(body) != checksum:
        raise SignatureError("the hub's public key is not an nkey")
    return nacl.signing.VerifyKey(body[1:])


def verify_policy(public_key: str, text: bytes, signature: str) -> None:
    """Raise SignatureError unless ``signature`` is the holder of ``public_key``'s, over ``text``."""
    try:
        sig = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("the signature is not base64") from None
    key = _verify_key(public_key)
    try:
        key.verify(text, sig)
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise SignatureError("the signature is not the hub's") from None
