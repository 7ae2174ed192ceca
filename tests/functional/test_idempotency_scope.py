"""Issue 20, finding 5: an Idempotency-Key belongs to the caller that sent it.

A real hub over HTTP with an agent for functions: the admin creates a workload and invokes a
function (sync and async) with key K; another token sending the same K gets its own new object
(201, its own invocation and result), never the admin's; each caller replaying K gets its first.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from harness import PYTHON_FUNCTIONS, running_agents, running_hub

from controlplane.store.identities import IdentityStore

WORKLOAD = {"name": "w", "command": ["true"], "resources": {"cpu": 0.1, "memory": "16Mi"}}
ECHO = {"name": "echo", "source": "def handle(e, c):\n    return e\n", "handler": "handle"}


async def _call(url: str, token: str, body: Any, key: str) -> tuple[int, dict[str, str], Any]:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=20)) as response,
    ):
        return response.status, dict(response.headers), await response.json(content_type=None)


async def test_a_key_sent_by_another_token_never_returns_the_admins_workload_or_invocation(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS),
    ):
        identities = IdentityStore(running.hub.store)
        admin = (await identities.create_api_token("admin-2", ["admin"])).token
        writer = (await identities.create_api_token("writer", ["workloads"])).token  # no read
        caller = (await identities.create_api_token("caller", ["functions"])).token
        workloads = running.url + "/v1/workloads"

        # Workloads: the same key from two tokens is two workloads.
        status, _, first = await _call(workloads, admin, WORKLOAD, "K")
        assert status == 201
        status, _, mine = await _call(workloads, writer, {**WORKLOAD, "name": "mine"}, "K")
        assert status == 201 and mine["id"] != first["id"] and mine["name"] == "mine"
        status, _, again = await _call(workloads, writer, WORKLOAD, "K")
        assert (status, again["id"]) == (200, mine["id"]), "the caller's own retry finds its first"
        status, _, replay = await _call(workloads, admin, WORKLOAD, "K")
        assert (status, replay["id"]) == (200, first["id"])

        assert (await api.call("POST", "/v1/functions", ECHO))[0] == 201
        invoke = running.url + "/v1/functions/echo/invoke"
        # Synchronous: the other caller's invocation runs and answers its own event.
        status, headers, result = await _call(invoke, admin, {"who": "admin"}, "K")
        assert (status, result) == (200, {"who": "admin"}), result
        admin_invocation = headers["X-Edgeplane-Invocation-Id"]
        status, headers, result = await _call(invoke, caller, {"who": "caller"}, "K")
        assert (status, result) == (200, {"who": "caller"}), result
        assert "X-Edgeplane-Idempotent-Replay" not in headers
        assert headers["X-Edgeplane-Invocation-Id"] != admin_invocation
        caller_invocation = headers["X-Edgeplane-Invocation-Id"]
        for token, invocation, who in (
            (caller, caller_invocation, "caller"),
            (admin, admin_invocation, "admin"),
        ):
            status, headers, result = await _call(invoke, token, {"who": "nobody"}, "K")
            assert (status, result) == (200, {"who": who}), result
            assert headers["X-Edgeplane-Idempotent-Replay"] == "true"
            assert headers["X-Edgeplane-Invocation-Id"] == invocation

        # Asynchronous: a new invocation (202), not the admin's (200 with its id).
        status, _, queued = await _call(invoke + "?async=1", admin, {"n": 1}, "A")
        assert status == 202
        status, _, other = await _call(invoke + "?async=1", caller, {"n": 2}, "A")
        assert status == 202 and other["invocation_id"] != queued["invocation_id"]
        status, _, retried = await _call(invoke + "?async=1", caller, {"n": 3}, "A")
        assert (status, retried["invocation_id"]) == (200, other["invocation_id"])
