"""Issue 20, findings 4 and 6: no secret in any log line, no request can forge a log line, and
no agent key can flood the hub's log.

``controlplane up --agents 1`` runs as a real process with its stderr (the hub's log and its
agent's, which inherits it) captured to a file. The run uses every secret there is: the admin
token, a second API token, a join token (redeemed, then replayed), the agent's nkey seed (read
from its credentials file). An attacker sends a 9,000-byte Authorization header that starts with
a valid token (aiohttp refuses it with a 400 and logs an ERROR with the header's start) and
paths with ``%0a``/``%0d``/``%1b`` that spell a forged CRITICAL record. Then the log is grepped:
no secret appears in it, whole or in part, and every line is one record of the log format.

The flood: an enrolled node's own credentials publish 2,000 garbage heartbeats and 300 requests
the hub refuses; every one is counted, and the hub's log says so in a few lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from functools import partial

import aiohttp
import nats
from harness import poll, register_message, running_hub, secured_nats, wait_for

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.enrolment import CREDENTIALS_FILE
from edgeplane_contract.messages import Subjects, encode

from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.natsd import free_port
from controlplane.store.identities import IdentityStore

_poll = partial(poll, timeout=30.0, every=0.1)

# One record: "2026-12-04 16:16:26,074 ERROR aiohttp.server: message" (logfmt.LOG_FORMAT).
RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
FORGED = "2026-01-01 00:00:00,000 CRITICAL edgeplane.hub: ANON-FORGED"


def _call(base: str, method: str, path: str, token: str | None, body: object = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _raw(port: int, request: bytes) -> bytes:
    """Send ``request`` as it is (what urllib would refuse to send) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.settimeout(10)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _token_in(output: str, kind: str) -> str:
    match = re.search(rf"ep_{kind}_[a-f0-9]{{16}}_[A-Za-z0-9_-]+", output)
    assert match, output
    return match.group(0)


def test_the_logs_of_a_run_that_used_every_secret_hold_none_and_no_forged_line(tmp_path):
    port, data = free_port(), tmp_path / "data"
    log_path = tmp_path / "up.log"
    env = {**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""}
    with log_path.open("w") as log_file:
        up = subprocess.Popen(
            [sys.executable, "-m", "controlplane.cli", "up", "--agents", "1", "--port", str(port),
             "--data-dir", str(data), "--log-level", "DEBUG", "--heartbeat-interval", "0.5"],
            stdout=subprocess.PIPE, stderr=log_file, env=env, text=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    secrets: dict[str, str] = {}
    try:
        assert f"API {base}" in up.stdout.readline()
        secrets["admin token"] = admin = (data / "admin.token").read_text().strip()
        _poll(lambda: _call(base, "GET", "/v1/nodes/edge-1", admin), lambda r: r[0] == 200)
        store = ["--data-dir", str(data)]
        secrets["second token"] = reader = _token_in(
            _cli("token", "create", "--name", "reader", "--scope", "read", *store), "api"
        )
        secrets["join token"] = join = _token_in(_cli("agent-token", "create", *store), "join")
        credentials = json.loads((data / "agents" / "edge-1" / CREDENTIALS_FILE).read_text())
        secrets["agent seed"] = credentials["seed"]
        secrets["joined seed"] = seed = new_user_seed()

        assert _call(base, "GET", "/v1/nodes", reader)[0] == 200
        assert _call(base, "POST", "/v1/workloads", reader, {"name": "x", "command": ["true"]})[0] == 403
        assert _call(base, "GET", "/v1/nodes", admin + "x")[0] == 401  # a near miss
        assert _call(base, "GET", "/v1/nodes", reader[:-4] + "AAAA")[0] == 401
        join_body = {"token": join, "node": "edge-9", "public_key": public_key_of(seed)}
        assert _call(base, "POST", "/v1/join", None, join_body)[0] == 201
        assert _call(base, "POST", "/v1/join", None, {**join_body, "node": "edge-10"})[0] == 403
        # The agent's seed where a careless client would put it: a bad request body, a header.
        assert _call(base, "POST", "/v1/join", None, {**join_body, "public_key": seed})[0] in (400, 422)
        assert _call(base, "GET", "/v1/nodes", credentials["seed"])[0] == 401

        # An oversized Authorization header that starts with a valid token: 400 from aiohttp.
        oversized = f"Bearer {admin}" + "A" * (9000 - len(admin) - 7)
        answer = _raw(
            port, f"GET /v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: {oversized}\r\n\r\n".encode()
        )
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n", 1)[0], answer[:200]
        # Paths that decode to a line break and a forged record, unauthenticated.
        forged = FORGED.replace(" ", "%20")
        for brk in ("%0a", "%0d%0a", "%0d", "%1b[2K%0d", "%c2%85", "%e2%80%a8"):
            _raw(
                port, f"GET /v1/nodes{brk}{forged} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            _raw(port, f"GET /v1/x{brk}{forged} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        # A workload whose command carries the admin token through the agent's run path.
        assert _call(base, "POST", "/v1/workloads", admin, {"name": "t", "command": ["true"]})[0] == 201
        time.sleep(1.0)  # let the agent and the hub log what they do with all of it
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)

    text = log_path.read_text(encoding="utf-8", errors="replace")
    assert "ANON-FORGED" in text, "the forged paths reached the log (escaped)"
    assert "Error handling request" in text or "8190" in text, "aiohttp logged the oversized header"
    for what, secret in secrets.items():
        # The whole secret, and the part of a token after its id (or a seed's first 20 characters).
        part = secret.split("_", 3)[-1][:20] if secret.startswith("ep_") else secret[2:22]
        assert secret not in text, f"the {what} is in the log"
        assert part not in text, f"part of the {what} ({part}) is in the log"
    lines = text.splitlines()
    assert lines, "the hub logged nothing"
    strays = [line for line in lines if not RECORD.match(line)]
    assert not strays, f"lines that are not one record each: {strays[:5]}"
    assert not any(line.startswith(FORGED[:24]) for line in lines)
    levels = {match.group(1) for match in map(RECORD.match, lines) if match}
    assert "CRITICAL" not in levels, "a forged record"


async def test_a_node_sending_thousands_of_bad_messages_is_counted_always_and_logged_a_few_times(
    tmp_path, sqlite_url, caplog
):
    caplog.set_level(logging.WARNING, logger="edgeplane.hub.bus")
    subjects = Subjects(cluster="default", prefix="edgeplane.v1")
    with secured_nats(tmp_path / "nats") as secured:
        async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
            running.hub.bus.refusals_log.interval_s = 1.0  # the default 10 s, shortened for the test
            token = await IdentityStore(running.hub.store).create_join_token("default", 60.0)
            seed = new_user_seed()
            body = {"token": token.token, "node": "edge-2", "public_key": public_key_of(seed)}
            async with aiohttp.ClientSession() as session:
                async with session.post(running.url + "/v1/join", json=body) as joined:
                    assert joined.status == 201, await joined.text()
            nc = await nats.connect(
                secured.url, nkeys_seed_str=seed, allow_reconnect=False, connect_timeout=5,
                inbox_prefix=agent_inbox_prefix("default", "edge-2"),
            )  # fmt: skip
            try:
                for i in range(2000):
                    await nc.publish(subjects.heartbeat("edge-2"), b"garbage %d" % i)
                register = encode(register_message("edge-2"))
                for _ in range(300):  # a reply subject outside its inbox: refused, well-formed
                    await nc.publish(subjects.register("edge-2"), register, reply=subjects.command("edge-1"))
                await nc.flush(timeout=10)
            finally:
                with contextlib.suppress(Exception):
                    await nc.close()
            health = await wait_for(
                lambda: api.get("/healthz"),
                lambda h: (
                    h["malformed_messages"].get("heartbeat", 0) >= 2000
                    and h["rejected_messages"].get("register", 0) >= 300
                ),
                timeout=30,
            )
            assert health["malformed_messages"]["heartbeat"] == 2000
            assert health["rejected_messages"]["register"] == 300
            await asyncio.sleep(1.5)  # the summaries of what was held back come due

    lines = [r.getMessage() for r in caplog.records if "edge-2" in r.getMessage()]
    assert 2 <= len(lines) <= 8, lines
    assert lines[0].startswith("dropped malformed heartbeat from edge-2: ")
    counted = {"heartbeat": 0, "register": 0}
    for line in lines:
        kind = "heartbeat" if "heartbeat" in line else "register"
        more = re.search(r" (\d+) more ", line)
        counted[kind] += int(more.group(1)) if more else 1
    assert counted == {"heartbeat": 2000, "register": 300}, lines
