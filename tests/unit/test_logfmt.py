"""The shared log format: secrets redacted, one line per record, whatever the message holds."""

from __future__ import annotations

import io
import logging

import pytest

from edgeplane_contract.logfmt import OneLineFormatter, RedactSecrets, redact_secrets

TOKEN = "ep_api_0123456789abcdef_" + "Zx9-_" * 9
SEED = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token {TOKEN} used", "token ep_api_0123456789abcdef_[REDACTED] used"),
        ("ep_join_0123", "ep_join_[REDACTED]"),
        (f"b'Bearer {TOKEN[:30]}...'", "b'Bearer [REDACTED]'"),
        ("{'Authorization': 'Basic dXNlcjpwYXNz'}", "{'Authorization': '[REDACTED]'}"),
        ("Authorization: Token abc", "Authorization: [REDACTED]"),
        (f"seed {SEED}", "seed [REDACTED]"),
        (f"seed {SEED[:30]}", "seed [REDACTED]"),
        ("send 'Authorization: Bearer <token>'", "send 'Authorization: Bearer <token>'"),
        ("node edge-1 enrolled", "node edge-1 enrolled"),
    ],
)
def test_secrets_are_redacted_and_the_rest_is_kept(text, expected):
    assert redact_secrets(text) == expected


def _write(record_args: tuple, exc: BaseException | None = None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter())
    handler.addFilter(RedactSecrets())
    logger = logging.getLogger("t.logfmt")
    logger.propagate, logger.handlers = False, [handler]
    if exc is None:
        logger.warning(*record_args)
    else:
        try:
            raise exc
        except BaseException:
            logger.exception(*record_args)
    return stream.getvalue()


def test_a_record_is_one_line_whatever_its_message_and_traceback_hold():
    out = _write(("GET %s 401", "/x\n2026-01-01 CRITICAL edgeplane.hub: FORGED\r\x1b[2K\x85\u2028"))
    assert out.count("\n") == 1 and len(out.splitlines()) == 1
    assert "/x\\n2026-01-01 CRITICAL edgeplane.hub: FORGED\\r\\x1b[2K\\x85\\u2028 401" in out
    out = _write(("request failed",), ValueError(f"bad header: Bearer {TOKEN}\nmore"))
    assert len(out.splitlines()) == 1 and "Traceback" in out and "ValueError" in out
    assert TOKEN not in out and TOKEN[24:40] not in out and "Bearer [REDACTED]" in out
