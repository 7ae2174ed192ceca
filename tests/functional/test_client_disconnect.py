"""A client that goes away is not the hub's error: no ERROR, no 500, a 499 in the access log."""

from __future__ import annotations

import asyncio
import logging

import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for


def _access_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "edgeplane.access" and path in r.getMessage()]


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]


async def _send_and_close(url: str, token: str, head: str, body: bytes, *, after_s: float) -> None:
    """Send a request (possibly a partial body) over a raw connection, then close it."""
    host, port = url.split("//")[1].rsplit(":", 1)
    _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout=5)
    writer.write(f"{head}\r\nHost: hub\r\nAuthorization: {token}\r\n".encode() + body)
    await writer.drain()
    await asyncio.sleep(after_s)
    writer.close()


async def test_a_client_that_closes_mid_body_is_logged_as_gone_not_as_an_error(
    nats_server, sqlite_url, caplog
):
    """Was: ``ERROR unhandled error on POST /v1/workloads`` with a traceback and a 500."""
    caplog.set_level(logging.INFO)
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        token = api.session.headers["Authorization"]
        head = "POST /v1/workloads HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1000"
        await _send_and_close(running.url, token, head, b'\r\n{"name": ', after_s=0.3)

        async def logged() -> list[str]:
            return _access_lines(caplog, "POST /v1/workloads")

        lines = await wait_for(logged, bool, timeout=10)
    assert " 499 " in lines[0], lines
    assert not _errors(caplog), _errors(caplog)
    assert any("client disconnected during POST /v1/workloads" in r.getMessage() for r in caplog.records)


async def test_a_client_that_leaves_a_running_invocation_is_logged_with_499(
    nats_server, sqlite_url, tmp_path, caplog
):
    """The invocation still runs to its end (it may have effects); its access line says the
    client was gone (was: 200, as if it had been answered)."""
    caplog.set_level(logging.INFO)
    source = "import time\ndef handle(event, context):\n    time.sleep(1.0)\n    return event\n"
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["d1"], **PYTHON_FUNCTIONS),
    ):
        body = {"name": "slow", "source": source, "handler": "handle", "timeout_s": 10}
        assert (await api.call("POST", "/v1/functions", body))[0] == 201
        assert (await api.call("POST", "/v1/functions/slow/invoke", 0))[0] == 200  # warm
        token = api.session.headers["Authorization"]
        head = (
            "POST /v1/functions/slow/invoke HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1"
        )
        await _send_and_close(running.url, token, head, b"\r\n7", after_s=0.3)

        async def logged() -> list[str]:
            return _access_lines(caplog, "POST /v1/functions/slow/invoke")

        lines = await wait_for(logged, lambda found: len(found) == 2, timeout=10)
    assert " 200 " in lines[0] and " 499 " in lines[1], lines
    assert not _errors(caplog), _errors(caplog)
