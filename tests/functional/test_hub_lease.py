"""One active hub per store, on real processes (issue 24, first slice).

Two hubs on one store both reconcile, place and dispatch: work runs twice. On SQLite the second
``serve`` (or ``up``) is refused at once in one line naming the holder; on PostgreSQL the second
waits as a standby (alive, not ready: 503 with Retry-After to every request but /livez), and
becomes the active hub within seconds of the first one's
``kill -9``, serving what the first one stored.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import wait_for

from controlplane.natsd import free_port


def _serve(
    tmp_path: Path, name: str, nats_url: str, port: int, *extra: str
) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / f"{name}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "serve", "--nats", nats_url, "--port", str(port),
         "--log-level", "WARNING", *extra],
        stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    return process, log


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


async def _get(
    session: aiohttp.ClientSession, url: str, token: str | None = None, *, timeout_s: float = 5.0
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with session.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            return response.status, await response.json()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, repr(exc)


async def _post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], token: str | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with session.post(url, json=body, headers=headers) as response:
        return response.status, await response.json()


async def _leading(session: aiohttp.ClientSession, port: int, data_dir: Path) -> str:
    """Wait for the hub on ``port`` to lead; its admin token."""
    await wait_for(
        lambda: _get(session, f"http://127.0.0.1:{port}/readyz"), lambda r: r[0] == 200, timeout=60
    )
    return (data_dir / "admin.token").read_text().strip()


async def test_a_second_hub_on_one_sqlite_store_is_refused_in_one_line(nats_server, tmp_path):
    data = str(tmp_path / "hub")
    first_port, second_port = free_port(), free_port()
    first, _ = _serve(tmp_path, "first", nats_server.url, first_port, "--data-dir", data)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_for(
                lambda: _get(session, f"http://127.0.0.1:{first_port}/readyz"),
                lambda r: r[0] == 200,
                timeout=60,
                every=0.2,
            )
            started = time.monotonic()
            second = subprocess.run(
                [sys.executable, "-m", "controlplane.cli", "serve", "--nats", nats_server.url, "--port",
                 str(second_port), "--data-dir", data, "--log-level", "WARNING"],
                capture_output=True, text=True, timeout=60, cwd=tmp_path,
            )  # fmt: skip
            assert time.monotonic() - started < 20
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 1 and len(lines) == 1, second.stderr
            assert f"another hub (pid {first.pid}," in lines[0], lines
            assert "one hub per SQLite store" in lines[0] and "PostgreSQL" in lines[0], lines
            assert second.stdout == ""
            # The first hub was not disturbed, and the second never listened.
            assert (await _get(session, f"http://127.0.0.1:{first_port}/readyz"))[0] == 200
            assert (await _get(session, f"http://127.0.0.1:{second_port}/livez"))[0] == 0
        # Once the first is gone, a hub starts on the same store (the kernel dropped the lock).
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        again, _ = _serve(tmp_path, "again", nats_server.url, second_port, "--data-dir", data)
        try:
            async with aiohttp.ClientSession() as session:
                ready = await wait_for(
                    lambda: _get(session, f"http://127.0.0.1:{second_port}/readyz"),
                    lambda r: r[0] == 200,
                    timeout=60,
                    every=0.2,
                )
                assert ready[0] == 200
        finally:
            _stop(again)
    finally:
        _stop(first)


async def test_a_standby_on_postgresql_takes_over_when_the_active_hub_is_killed(
    nats_server, postgres_url, tmp_path
):
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://")
    a_port, b_port = free_port(), free_port()
    a, _ = _serve(
        tmp_path, "a", nats_server.url, a_port, "--data-dir", str(tmp_path / "a"), "--database-url", url
    )
    b = None
    try:
        async with aiohttp.ClientSession() as session:
            token = await _leading(session, a_port, tmp_path / "a")
            status, created = await _post(
                session,
                f"http://127.0.0.1:{a_port}/v1/workloads",
                {"name": "kept", "command": ["true"]},
                token,
            )
            assert status == 201, created
            workload = created["id"]

            b, b_log = _serve(
                tmp_path,
                "b",
                nats_server.url,
                b_port,
                "--data-dir",
                str(tmp_path / "b"),
                "--database-url",
                url,
            )

            async def standby_log() -> str:
                return b_log.read_text()

            await wait_for(standby_log, lambda text: "standby" in text, timeout=30)
            # A standby is alive but not ready itself, and forwards the API to the leader, which
            # authenticates as for any client.
            standby = f"http://127.0.0.1:{b_port}"
            await wait_for(lambda: _get(session, standby + "/livez"), lambda r: r == (200, {"status": "ok"}))
            status, body = await _get(session, standby + "/readyz")
            assert status == 503 and "hub" in body["down"], body
            assert body["role"] == "standby" and body["leader"] == f"http://127.0.0.1:{a_port}", body
            status, body = await _post(session, standby + "/v1/workloads", {"name": "x", "command": ["true"]})
            assert status == 401, body  # the leader's answer: no token
            status, body = await _post(
                session, standby + "/v1/workloads", {"name": "via-standby", "command": ["true"]}, token
            )
            assert status == 201, body
            forwarded = body["id"]
            status, body = await _get(session, f"http://127.0.0.1:{a_port}/v1/workloads/{forwarded}", token)
            assert status == 200 and body["name"] == "via-standby", body
            status, body = await _get(session, f"{standby}/v1/workloads/{workload}", token)
            assert status == 200 and body["name"] == "kept", body
            assert b.poll() is None

            os.kill(a.pid, signal.SIGKILL)
            killed = time.monotonic()
            a.wait(timeout=10)
            await wait_for(
                lambda: _get(session, f"http://127.0.0.1:{b_port}/readyz"), lambda r: r[0] == 200, timeout=30
            )
            took = time.monotonic() - killed
            assert took < 15, took
            status, body = await _get(session, f"http://127.0.0.1:{b_port}/v1/workloads/{workload}", token)
            assert status == 200 and body["name"] == "kept", body
            print(f"\nstandby ready {took:.1f} s after the active hub's kill -9")
    finally:
        _stop(a)
        if b is not None:
            _stop(b)


@pytest.mark.parametrize("command", ["up"])
def test_a_second_up_in_the_same_directory_is_refused(tmp_path, command):
    first = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", command, "--agents", "0", "--port", str(free_port()),
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = first.stdout.readline()
            if "edgeplane is up" in line or not line:
                break
        assert "edgeplane is up" in line, line
        second = subprocess.run(
            [sys.executable, "-m", "controlplane.cli", command, "--agents", "0", "--port", str(free_port()),
             "--log-level", "WARNING"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 1 and len(lines) == 1, second.stderr
        assert lines[0].startswith("controlplane up: another hub (pid "), lines
    finally:
        _stop(first)


async def test_a_frozen_active_hub_is_replaced_and_stops_when_it_wakes(nats_server, postgres_url, tmp_path):
    """SIGSTOP of the active hub: its lease session goes silent, the standby ends it after the
    lease (5 s here) and becomes active; the old hub, woken, finds its session gone, reconciles
    nothing and exits 1."""
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://")
    a_port, b_port = free_port(), free_port()
    lease = ("--hub-lease-s", "5")
    a, a_log = _serve(
        tmp_path,
        "a",
        nats_server.url,
        a_port,
        "--data-dir",
        str(tmp_path / "a"),
        "--database-url",
        url,
        *lease,
    )
    b = None
    try:
        async with aiohttp.ClientSession() as session:
            await wait_for(
                lambda: _get(session, f"http://127.0.0.1:{a_port}/readyz"), lambda r: r[0] == 200, timeout=60
            )
            b_dir = str(tmp_path / "b")
            b, b_log = _serve(
                tmp_path, "b", nats_server.url, b_port, "--data-dir", b_dir, "--database-url", url, *lease
            )

            async def b_said() -> str:
                return b_log.read_text()

            await wait_for(b_said, lambda text: "standby" in text, timeout=30)
            # A freeze shorter than the lease changes nothing: a keeps it, b keeps waiting.
            os.kill(a.pid, signal.SIGSTOP)
            time.sleep(1.5)
            os.kill(a.pid, signal.SIGCONT)
            time.sleep(2.5)
            assert a.poll() is None and (await _get(session, f"http://127.0.0.1:{a_port}/readyz"))[0] == 200
            assert "silent for" not in b_log.read_text() and "this hub stops" not in a_log.read_text()
            os.kill(a.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            # A request b forwards to the frozen a waits for it: b's takeover must not wait for it
            # in turn (it answers 503 + Retry-After, and the client asks again). The frozen leader
            # had the request, so it is leader_lost (maybe carried out), not unavailable.
            token = (tmp_path / "a" / "admin.token").read_text().strip()
            waiting = asyncio.create_task(
                _get(session, f"http://127.0.0.1:{b_port}/v1/nodes", token, timeout_s=60)
            )
            await wait_for(
                lambda: _get(session, f"http://127.0.0.1:{b_port}/readyz"), lambda r: r[0] == 200, timeout=30
            )
            took = time.monotonic() - frozen
            assert 5 <= took < 15, took
            status, body = await asyncio.wait_for(waiting, 10)
            assert status == 503 and body["error"]["code"] == "leader_lost", body
            assert "silent for" in b_log.read_text()
            os.kill(a.pid, signal.SIGCONT)
            assert a.wait(timeout=20) == 1
            assert "this hub stops" in a_log.read_text()
            assert (await _get(session, f"http://127.0.0.1:{b_port}/readyz"))[0] == 200
            print(f"\nstandby active {took:.1f} s after the active hub froze (lease 5 s)")
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
        _stop(a)
        if b is not None:
            _stop(b)


async def test_a_replica_whose_secrets_key_cannot_open_the_store_is_refused_at_start(
    nats_server, postgres_url, tmp_path
):
    """Replicas share one --secrets-key: one with another key would fail only when it took over
    (every replica at once, after the leader died), so it is refused at its start, in one line."""
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://")
    a_port = free_port()
    # --rate-limit 1: each address gets 4 join attempts at once (the join test below).
    a, _ = _serve(
        tmp_path, "a", nats_server.url, a_port, "--data-dir", str(tmp_path / "a"), "--database-url", url,
        "--rate-limit", "1",
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:
            token = await _leading(session, a_port, tmp_path / "a")
            sealed = {"name": "sealed", "command": ["true"], "env": {"SECRET": "s3cret"}}
            status, created = await _post(session, f"http://127.0.0.1:{a_port}/v1/workloads", sealed, token)
            assert status == 201, created
        b, b_log = _serve(
            tmp_path,
            "b",
            nats_server.url,
            free_port(),
            "--data-dir",
            str(tmp_path / "b"),
            "--database-url",
            url,
        )
        assert b.wait(timeout=60) == 1
        lines = b_log.read_text().strip().splitlines()
        assert len(lines) == 1 and "needs the same --secrets-key" in lines[0], lines
        assert "s3cret" not in b_log.read_text()
        # With the leader's key it stands by.
        same_key = ("--secrets-key", str(tmp_path / "a" / "secrets.key"))
        c_dir, c_port = str(tmp_path / "c"), free_port()
        c, c_log = _serve(
            tmp_path, "c", nats_server.url, c_port, "--data-dir", c_dir, "--database-url", url, *same_key
        )
        try:

            async def c_said() -> str:
                return c_log.read_text()

            await wait_for(c_said, lambda text: "standby" in text, timeout=30)
            assert c.poll() is None
            await _joins_count_per_client_through_a_standby(a_port, c_port)
        finally:
            _stop(c)
    finally:
        _stop(a)


async def _join_from(source: str, url: str, headers: dict[str, str] | None = None) -> int:
    """POST /v1/join (its body refused: this hub takes anonymous agents) from ``source``."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        body = {"token": "ep_join_x", "node": "n1", "public_key": "U" + "A" * 55}
        async with session.post(url + "/v1/join", json=body, headers=headers or {}) as response:
            return response.status


async def _joins_count_per_client_through_a_standby(leader_port: int, standby_port: int) -> None:
    """The join limit counts per client even through a standby: the standby signs whom it
    forwards for with the replicas' shared key, and the leader trusts only that signature."""
    leader, standby = f"http://127.0.0.1:{leader_port}", f"http://127.0.0.1:{standby_port}"
    async with aiohttp.ClientSession() as session:  # it says "standby" before its site listens
        await wait_for(lambda: _get(session, standby + "/livez"), lambda r: r[0] == 200, timeout=30)
    # 127.0.0.2 spends its 4 attempts through the standby; its 5th is refused 429.
    answers = [await _join_from("127.0.0.2", standby) for _ in range(5)]
    assert answers[:4] == [409] * 4 and answers[4] == 429, answers
    # Another client through the same standby still has its own (it counted per standby before).
    assert await _join_from("127.0.0.3", standby) == 409
    # A client cannot claim to be forwarded: a header it signs itself is ignored.
    answers = [await _join_from("127.0.0.4", leader) for _ in range(5)]
    assert answers[4] == 429, answers
    forged = {"X-Edgeplane-Forwarded-For": f"127.0.0.9;{int(time.time())};{'0' * 64}"}
    assert await _join_from("127.0.0.4", leader, forged) == 429
