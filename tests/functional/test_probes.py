"""What deploy/kubernetes/hub.yaml relies on, on real processes (issue 22, items 1 and 2).

A nats-server and a ``controlplane serve`` hub; the nats-server is stopped: ``/livez`` stays 200
(a Kubernetes livenessProbe would not restart the hub) while ``/readyz`` turns 503 naming nats;
once a nats-server listens again on the same port, both answer 200. And an admin token made
beforehand with ``controlplane token create`` and placed (read-only, as the Secret is mounted) at
``<data-dir>/admin.token`` is the one the hub uses: no new token per pod restart.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import aiohttp
from harness import wait_for

from controlplane.natsd import NatsServer, free_port


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as response:
            return response.status, await response.json()
    except (aiohttp.ClientError, TimeoutError) as exc:  # the hub not listening yet
        return 0, repr(exc)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()


async def test_livez_stays_up_while_readyz_names_the_missing_nats(tmp_path):
    """Was: only /healthz, 503 without NATS, used as the livenessProbe: a NATS outage restarted
    the hub. Now /livez answers 200 throughout and /readyz 503 with ``down: ["nats"]``."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = NatsServer().start()
    hub_log = (tmp_path / "hub.log").open("wb")
    hub = subprocess.Popen(
        [sys.executable, "-m", "controlplane.cli", "serve", "--nats", server.url, "--port", str(port),
         "--data-dir", str(tmp_path / "hub"), "--log-level", "INFO"],
        stdout=hub_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:
            ready = await wait_for(
                lambda: _get(session, base + "/readyz"), lambda r: r[0] == 200, timeout=60, every=0.2
            )
            assert ready[1] == {"status": "ok", "database": True, "nats": True, "hub": True, "down": []}
            assert await _get(session, base + "/livez") == (200, {"status": "ok"})

            server.stop()
            _, body = await wait_for(
                lambda: _get(session, base + "/readyz"), lambda r: r[0] == 503, timeout=25, every=0.2
            )
            assert body["status"] == "unavailable" and body["down"] == ["nats"], body
            assert body["nats"] is False and body["database"] is True, body
            assert await _get(session, base + "/livez") == (200, {"status": "ok"})
            # /healthz keeps its old meaning (compatibility): degraded while NATS is away.
            healthz = await _get(session, base + "/healthz")
            assert healthz[0] == 503 and healthz[1]["nats"] is False, healthz

            server = NatsServer(port=server.port).start()  # the same URL the hub reconnects to
            ready = await wait_for(
                lambda: _get(session, base + "/readyz"), lambda r: r[0] == 200, timeout=40, every=0.2
            )
            assert ready[1]["down"] == [], ready
            assert await _get(session, base + "/livez") == (200, {"status": "ok"})
    finally:
        _stop(hub)
        hub_log.close()
        server.stop()


async def test_the_hub_uses_an_admin_token_made_beforehand_as_a_secret_provides_it(tmp_path):
    data_dir = tmp_path / "hub"
    cli = [sys.executable, "-m", "controlplane.cli"]
    subprocess.run(
        [*cli, "migrate", "--data-dir", str(data_dir)], check=True, capture_output=True, timeout=60
    )
    made = subprocess.run(
        [*cli, "token", "create", "--name", "admin", "--scope", "admin", "--data-dir", str(data_dir)],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    token = made.stdout.strip()
    token_file = data_dir / "admin.token"
    token_file.write_text(token)  # as kubectl stores a --from-literal: no newline
    os.chmod(token_file, 0o400)
    port = free_port()
    log = tmp_path / "hub.log"
    with NatsServer() as server, log.open("wb") as out:
        hub = subprocess.Popen(
            [*cli, "serve", "--nats", server.url, "--port", str(port), "--data-dir", str(data_dir)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            headers = {"Authorization": f"Bearer {token}"}
            async with aiohttp.ClientSession(headers=headers) as session:
                url = f"http://127.0.0.1:{port}"
                await wait_for(
                    lambda: _get(session, url + "/readyz"), lambda r: r[0] == 200, timeout=60, every=0.2
                )
                assert (await _get(session, url + "/v1/nodes"))[0] == 200
        finally:
            _stop(hub)
    text = log.read_text()
    assert f"admin token in {token_file}" in text and "new admin token" not in text, text[-2000:]
    assert token_file.read_text() == token
