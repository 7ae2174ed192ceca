"""Pure parts of API access: scopes per route, token format, lifetimes, rate buckets, redaction."""

from __future__ import annotations

import pytest

from controlplane.api.auth import RateLimiter, required_scope
from controlplane.api.redact import redact
from controlplane.auth.tokens import Principal, hash_token, new_token, parse_scopes, parse_ttl, token_id
from controlplane.commands.common import mask_url


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("GET", "/v1/workloads", "read"),
        ("GET", "/openapi.json", "read"),
        ("POST", "/v1/workloads", "workloads"),
        ("DELETE", "/v1/workloads/abc", "workloads"),
        ("POST", "/v1/functions", "functions"),
        ("POST", "/v1/functions/echo/invoke", "functions"),
        ("DELETE", "/v1/functions/echo", "functions"),
        ("DELETE", "/v1/nodes/edge-1", "nodes"),
        ("POST", "/v1/something-new", "admin"),
    ],
)
def test_each_operation_needs_the_scope_of_its_resource(method, path, scope):
    assert required_scope(method, path) == scope


def test_admin_implies_every_scope_and_others_only_their_own():
    admin = Principal("1", "a", frozenset({"admin"}))
    reader = Principal("2", "r", frozenset({"read"}))
    assert all(admin.allows(s) for s in ("read", "workloads", "functions", "nodes", "admin"))
    assert reader.allows("read") and not reader.allows("workloads") and not reader.allows("admin")


def test_tokens_are_typed_and_only_their_hash_is_comparable():
    ident, token = new_token("api")
    assert token_id(token, "api") == ident
    assert token_id(token, "join") is None
    assert token_id("ep_api_zz_" + "x" * 40, "api") is None
    assert hash_token(token) != token and len(hash_token(token)) == 64


@pytest.mark.parametrize(
    ("raw", "seconds"), [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("12h", 43200.0), ("7d", 604800.0)]
)
def test_ttls_read_as_durations(raw, seconds):
    assert parse_ttl(raw) == seconds


@pytest.mark.parametrize("raw", ["-1h", "1w", "soon", "100000d"])
def test_bad_ttls_are_refused(raw):
    with pytest.raises(ValueError):
        parse_ttl(raw)


def test_scopes_are_checked():
    assert parse_scopes("workloads, read") == ["read", "workloads"]
    with pytest.raises(ValueError, match="unknown scope 'root'"):
        parse_scopes("read,root")
    with pytest.raises(ValueError):
        parse_scopes("")


def test_a_rate_bucket_allows_its_burst_then_refills_at_its_rate():
    limiter = RateLimiter(rate_per_s=2.0, burst=3)
    assert [limiter.take("t", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("t", now=0.0) == pytest.approx(0.5)
    assert limiter.take("other", now=0.0) == 0.0
    assert limiter.take("t", now=0.5) == 0.0
    assert RateLimiter(rate_per_s=0, burst=1).take("t") == 0.0


def test_redaction_masks_env_without_admin_and_tracebacks_without_functions():
    body = {"spec": {"env": {"K": "secret"}}, "error": {"message": "boom", "traceback": "File x"}}
    reader = Principal("1", "r", frozenset({"read"}))
    fn = Principal("2", "f", frozenset({"functions"}))
    admin = Principal("3", "a", frozenset({"admin"}))
    assert redact(body, reader) == {"spec": {"env": {"K": "***"}}, "error": {"message": "boom"}}
    assert redact(body, fn)["error"]["traceback"] == "File x"
    assert redact(body, fn)["spec"]["env"] == {"K": "***"}
    assert redact(body, admin) == body


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/edge", "postgresql://app:***@db:5432/edge"),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_urls_are_shown_without_passwords(url, shown):
    assert mask_url(url) == shown
