"""A standby's answer when the leader it forwards to fails: ``unavailable`` when the request never
reached a leader (safe to resend), ``leader_lost`` when it did and no answer came (it may have
been carried out: resend only with the same Idempotency-Key). Real sockets on loopback."""

from __future__ import annotations

import asyncio
import socket

import aiohttp

from controlplane.coordination.standby_site import start_standby_site
from controlplane.natsd import free_port


async def _post_through_standby(leader_url: str) -> tuple[int, dict[str, object], str | None]:
    port = free_port()

    async def leader() -> str:
        return leader_url

    runner = await start_standby_site("127.0.0.1", port, leader=leader)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/v1/workloads",
                json={"name": "w"},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response,
        ):
            return response.status, await response.json(), response.headers.get("Retry-After")
    finally:
        await runner.cleanup()


async def test_a_leader_that_refuses_the_connection_never_had_the_request():
    closed = free_port()  # nothing listens there
    status, body, retry_after = await _post_through_standby(f"http://127.0.0.1:{closed}")
    assert status == 503 and retry_after == "2"
    assert body["error"]["code"] == "unavailable", body  # type: ignore[index]


async def test_a_leader_that_takes_the_request_and_dies_is_leader_lost_not_unavailable():
    """The leader reads the whole request, then its connection drops (a kill -9 mid-request)."""
    got: list[bytes] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5))
        writer.transport.abort()  # a reset, no answer

    server = await asyncio.start_server(swallow, "127.0.0.1", 0, family=socket.AF_INET)
    try:
        port = server.sockets[0].getsockname()[1]
        status, body, retry_after = await _post_through_standby(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await server.wait_closed()
    assert got and got[0].startswith(b"POST /v1/workloads"), got  # it did reach the leader
    assert status == 503 and retry_after == "2"
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == "leader_lost", body
    assert "Idempotency-Key" in str(error["message"])
