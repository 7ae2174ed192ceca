"""Who may call the API: tokens, scopes, JSON-only bodies, rate limits, audit, TLS, the token CLI."""

from __future__ import annotations

import json
import logging
import os
import ssl
import subprocess
import sys
import time

import aiohttp
import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for

from controlplane.api.auth import AuthSettings
from controlplane.runtime.runner import start_hub
from controlplane.store.identities import IdentityStore

WORKLOAD = {"name": "w", "command": ["true"], "resources": {"cpu": 0.1, "memory": "16Mi"}}


async def _raw(method: str, url: str, **kwargs) -> tuple[int, dict, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, timeout=aiohttp.ClientTimeout(total=10), **kwargs) as response,
    ):
        body = await response.json(content_type=None)
        return response.status, dict(response.headers), body


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_every_route_but_healthz_needs_a_token(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        for path in ("/v1/nodes", "/v1/workloads", "/v1/events", "/v1/functions", "/openapi.json"):
            status, headers, body = await _raw("GET", running.url + path)
            assert status == 401, path
            assert body["error"]["code"] == "unauthorized" and body["error"]["field"] == "Authorization"
            assert headers["WWW-Authenticate"].startswith("Bearer")
        status, _, _ = await _raw("GET", running.url + "/healthz")
        assert status == 200
        # The harness's admin token works.
        assert (await api.call("GET", "/v1/nodes"))[0] == 200


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Basic dXNlcjpwYXNz", "Bearer not-a-token", "Bearer ep_api_0123456789abcdef_" + "x" * 43],
)
async def test_malformed_or_unknown_tokens_get_401(nats_server, sqlite_url, header):
    async with running_hub(nats_server.url, sqlite_url) as (running, _api):
        status, _, body = await _raw("GET", running.url + "/v1/nodes", headers={"Authorization": header})
        assert status == 401, body
        assert body["error"]["code"] == "unauthorized"


async def test_a_token_without_the_scope_gets_403_and_creates_nothing(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        reader = await IdentityStore(running.hub.store).create_api_token("dashboard", ["read"])
        status, _, _ = await _raw("GET", running.url + "/v1/workloads", headers=_bearer(reader.token))
        assert status == 200
        status, _, body = await _raw(
            "POST", running.url + "/v1/workloads", json=WORKLOAD, headers=_bearer(reader.token)
        )
        assert status == 403
        assert body["error"]["code"] == "forbidden" and "workloads" in body["error"]["message"]
        for path in ("/v1/functions", "/v1/functions/f/invoke"):
            status, _, _ = await _raw("POST", running.url + path, json={}, headers=_bearer(reader.token))
            assert status == 403, path
        assert (await api.get("/v1/workloads"))["total"] == 0


async def test_revoked_and_expired_tokens_stop_working(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, _api):
        identities = IdentityStore(running.hub.store)
        short = await identities.create_api_token("ci", ["read"], ttl_s=0.5)
        revoked = await identities.create_api_token("laptop", ["read"])
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(short.token)))[0] == 200
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(revoked.token)))[0] == 200
        assert await identities.revoke_api_token(revoked.id) == 1
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(revoked.token)))[0] == 401
        time.sleep(0.6)
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(short.token)))[0] == 401


async def test_a_cross_site_simple_post_is_refused_with_415(nats_server, sqlite_url):
    """A web page can POST text/plain without a preflight: such a body is never accepted."""
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        token = api.session.headers["Authorization"].split()[1]

        status, headers, body = await _raw(
            "POST",
            running.url + "/v1/workloads",
            data=json.dumps(WORKLOAD),
            headers={**_bearer(token), "Content-Type": "text/plain", "Origin": "http://evil.example"},
        )
        assert status == 415
        assert body["error"] == {
            "code": "unsupported_media_type",
            "message": "request bodies must be application/json, not 'text/plain'",
            "field": "Content-Type",
        }
        assert not any(h.lower().startswith("access-control-") for h in headers)
        # No CORS preflight is granted either.
        async with (
            aiohttp.ClientSession() as session,
            session.options(
                running.url + "/v1/workloads",
                headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
            ) as response,
        ):
            assert "Access-Control-Allow-Origin" not in response.headers
        assert (await api.get("/v1/workloads"))["total"] == 0


async def test_each_token_has_a_rate_limit_with_retry_after(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url, auth=AuthSettings(rate_per_s=1.0, burst=3)) as (
        running,
        api,
    ):
        statuses = [(await api.call("GET", "/v1/nodes"))[0] for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        other = await IdentityStore(running.hub.store).create_api_token("other", ["read"])
        # Another token has its own bucket.
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(other.token)))[0] == 200
        async with api.session.get(api.base + "/v1/nodes") as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) >= 1
            assert (await response.json())["error"]["code"] == "rate_limited"


async def test_mutating_calls_are_audited_with_the_token_name_and_access_logged(
    nats_server, sqlite_url, caplog
):
    caplog.set_level(logging.INFO, logger="edgeplane.access")
    async with running_hub(nats_server.url, sqlite_url) as (running, _api):
        ops = await IdentityStore(running.hub.store).create_api_token("ops-bot", ["workloads", "read"])
        status, _, created = await _raw(
            "POST", running.url + "/v1/workloads", json=WORKLOAD, headers=_bearer(ops.token)
        )
        assert status == 201
        status, _, _ = await _raw(
            "DELETE", running.url + f"/v1/workloads/{created['id']}", headers=_bearer(ops.token)
        )
        assert status == 202
        status, _, events = await _raw(
            "GET", running.url + "/v1/events?kind=ApiCall", headers=_bearer(ops.token)
        )
        audited = [(e["object_id"], e["data"]["method"], e["data"]["status"]) for e in events["items"]]
        assert audited == [("ops-bot", "POST", 201), ("ops-bot", "DELETE", 202)]
        assert all(ops.token not in str(e) for e in events["items"])
        assert (await _raw("GET", running.url + "/v1/nodes"))[0] == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "edgeplane.access"]
    assert any(line.startswith("POST /v1/workloads 201 principal=ops-bot") for line in lines), lines
    assert any(line.startswith("GET /v1/nodes 401 principal=-") for line in lines), lines
    assert not any(ops.token in line for line in lines)


def _make_cert(tmp_path) -> tuple[str, str]:
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return str(cert), str(key)


async def test_the_api_serves_https_with_a_given_certificate(nats_server, sqlite_url, tmp_path):
    from harness import hub_settings

    cert, key = _make_cert(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    running = await start_hub(
        hub_settings(nats_server.url),
        database_url=sqlite_url,
        host="127.0.0.1",
        port=0,
        ssl_context=server_ctx,
    )
    try:
        assert running.url.startswith("https://")
        admin = await IdentityStore(running.hub.store).create_api_token("tls", ["read"])
        client_ctx = ssl.create_default_context(cafile=cert)
        status, _, body = await _raw(
            "GET", running.url + "/v1/nodes", headers=_bearer(admin.token), ssl=client_ctx
        )
        assert status == 200 and body["total"] == 0
        with pytest.raises(aiohttp.ClientError):
            await _raw("GET", running.url.replace("https", "http") + "/v1/nodes")
    finally:
        await running.stop()


def _cli(*args: str, data_dir) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "token", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EDGEPLANE_DATABASE_URL": ""},
    )


async def test_token_cli_creates_lists_and_revokes_tokens_a_running_hub_honours(nats_server, tmp_path):
    data = tmp_path / "data"
    url = f"sqlite:///{data / 'edgeplane.sqlite3'}"
    data.mkdir()
    async with running_hub(nats_server.url, url) as (running, _api):
        created = _cli("create", "--name", "grafana", "--scope", "read", "--ttl", "1h", data_dir=data)
        assert created.returncode == 0, created.stderr
        token = created.stdout.strip()
        assert token.startswith("ep_api_") and "shown once" in created.stderr
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(token)))[0] == 200
        listed = _cli("list", data_dir=data)
        assert "grafana" in listed.stdout and "active" in listed.stdout and token not in listed.stdout
        # The store holds a hash, never the token.
        assert token.encode() not in (data / "edgeplane.sqlite3").read_bytes()
        revoked = _cli("revoke", "grafana", data_dir=data)
        assert revoked.returncode == 0 and "revoked 1" in revoked.stdout
        assert (await _raw("GET", running.url + "/v1/nodes", headers=_bearer(token)))[0] == 401
    bad = _cli("create", "--name", "x", "--scope", "root", data_dir=data)
    assert bad.returncode == 2 and "unknown scope 'root'" in bad.stderr
    again = _cli("revoke", "nobody", data_dir=data)
    assert again.returncode == 1 and "no active token" in again.stderr


async def test_env_values_are_masked_for_callers_without_admin(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        body = {**WORKLOAD, "env": {"DB_PASSWORD": "hunter2", "MODE": "fast"}}
        ops = await IdentityStore(running.hub.store).create_api_token("ops", ["workloads", "read"])
        status, _, created = await _raw(
            "POST", running.url + "/v1/workloads", json=body, headers=_bearer(ops.token)
        )
        assert status == 201 and created["spec"]["env"] == {"DB_PASSWORD": "***", "MODE": "***"}
        for path in (f"/v1/workloads/{created['id']}", "/v1/workloads"):
            status, _, seen = await _raw("GET", running.url + path, headers=_bearer(ops.token))
            assert status == 200 and "hunter2" not in json.dumps(seen), path
        shown = await api.workload(created["id"])  # the harness's admin token
        assert shown["spec"]["env"] == {"DB_PASSWORD": "hunter2", "MODE": "fast"}


async def test_function_env_and_tracebacks_are_shown_only_to_scopes_that_may_see_them(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        source = "def handle(e, c):\n    raise ValueError('no')\n"
        fn = {"name": "boom", "source": source, "handler": "handle", "env": {"API_KEY": "s3cret"}}
        status, registered = await api.call("POST", "/v1/functions", fn)
        assert status == 201 and registered["spec"]["env"] == {"API_KEY": "s3cret"}  # admin sees it
        identities = IdentityStore(running.hub.store)
        reader = await identities.create_api_token("reader", ["read"])
        deployer = await identities.create_api_token("deployer", ["functions", "read"])
        for path in ("/v1/functions/boom", "/v1/functions"):
            status, _, seen = await _raw("GET", running.url + path, headers=_bearer(reader.token))
            assert status == 200 and "s3cret" not in json.dumps(seen) and "API_KEY" in json.dumps(seen)
        status, queued = await api.call("POST", "/v1/functions/boom/invoke?async=1", {"x": 1})
        assert status == 202
        path = f"/v1/invocations/{queued['invocation_id']}"
        done = await wait_for(lambda: api.get(path), lambda i: i["status"] in ("Succeeded", "Failed"))
        assert done["status"] == "Failed" and "Traceback" in done["error"]["traceback"]
        status, _, as_reader = await _raw("GET", running.url + path, headers=_bearer(reader.token))
        assert status == 200 and as_reader["error"]["type"] == "ValueError"
        assert "traceback" not in as_reader["error"]
        status, _, as_deployer = await _raw("GET", running.url + path, headers=_bearer(deployer.token))
        assert status == 200 and "Traceback" in as_deployer["error"]["traceback"]


def test_a_bad_tls_option_fails_at_start_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "up", "--agents", "0", "--data-dir", str(tmp_path),
         "--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(tmp_path / "missing.key")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path / 'missing.crt'}: --tls-cert/--tls-key: cannot load" in lines[0]
    only_cert = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--tls-cert", "x.crt"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert only_cert.returncode == 2 and "--tls-key: --tls-cert and --tls-key go together" in only_cert.stderr
