"""Logs through the API: a replica's output and a function instance's stderr, fetched from the
node that keeps them (real hub, NATS, agents and processes)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import aiohttp
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for

COUNTER = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done; echo done >&2"


async def _text(api, path: str, *, timeout_s: float = 20.0) -> tuple[int, str, dict[str, str]]:
    async with api.session.get(api.base + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
        return response.status, await response.text(), dict(response.headers)


async def _submit(api, name: str, command: list[str]) -> str:
    status, body = await api.call(
        "POST",
        "/v1/workloads",
        {"name": name, "command": command, "resources": {"cpu": 0.2, "memory": "32Mi"}},
    )
    assert status == 201, body
    return body["id"]


async def test_a_replicas_output_is_read_tailed_and_followed_to_its_end(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]),
    ):
        workload = await _submit(api, "counter", ["sh", "-c", COUNTER])
        await wait_for(lambda: api.get(f"/v1/workloads/{workload}"), lambda w: w["status"] == "Running")
        # Following from the start gets every line as it comes, and ends when the replica does.
        started = time.monotonic()
        status, text, headers = await _text(api, f"/v1/workloads/{workload}/logs?follow=1")
        assert status == 200 and headers["X-Edgeplane-Node"] == "n1"
        assert text == "".join(f"line {i}\n" for i in range(1, 7)) + "done\n"
        assert time.monotonic() - started < 15
        assert (await api.get(f"/v1/workloads/{workload}"))["status"] == "Succeeded"

        status, text, headers = await _text(api, f"/v1/workloads/{workload}/logs")
        assert status == 200 and text.endswith("line 6\ndone\n")
        assert headers["X-Edgeplane-Log-Truncated"] == "false"
        assert headers["X-Edgeplane-Log-Next-Offset"] == str(len(text.encode()))
        status, text, _ = await _text(api, f"/v1/workloads/{workload}/logs?tail=2")
        assert (status, text) == (200, "line 6\ndone\n")
        status, text, headers = await _text(api, f"/v1/workloads/{workload}/logs?limit_bytes=14")
        assert (status, text, headers["X-Edgeplane-Log-Truncated"]) == (200, "line 1\nline 2\n", "true")

        # The same through the client CLI.
        token = tmp_path / "token"
        token.write_text(api.session.headers["Authorization"].removeprefix("Bearer "))
        token.chmod(0o600)
        cli = [
            sys.executable,
            "-m",
            "controlplane.cli",
            "logs",
            "--url",
            api.base,
            "--token-file",
            str(token),
        ]
        done = await asyncio.to_thread(
            subprocess.run, [*cli, workload, "--tail", "1"], capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
        done = await asyncio.to_thread(
            subprocess.run, [*cli, "nope"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1 and "workload 'nope' not found" in done.stderr

        # Clear errors: a replica that does not exist, a bad parameter, an unknown workload.
        status, body = await api.call("GET", f"/v1/workloads/{workload}/logs?replica=3")
        assert status == 404 and body["error"]["field"] == "replica"
        status, body = await api.call("GET", f"/v1/workloads/{workload}/logs?tail=-1")
        assert status == 422 and body["error"]["field"] == "tail"
        status, body = await api.call("GET", "/v1/workloads/nope/logs")
        assert status == 404 and body["error"]["field"] == "id"


async def test_the_log_of_a_node_that_is_gone_answers_503_and_a_function_instance_has_its_own(
    nats_server, sqlite_url, tmp_path
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        async with running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS):
            source = (
                "import sys\ndef handle(event, context):\n    print('saw', event, file=sys.stderr)\n"
                "    return 1\n"
            )
            status, _ = await api.call(
                "POST", "/v1/functions", {"name": "talk", "source": source, "handler": "handle"}
            )
            assert status == 201
            status, _ = await api.call("POST", "/v1/functions/talk/invoke", {"n": 7})
            assert status == 200
            function = await wait_for(lambda: api.get("/v1/functions/talk"), lambda f: f["instances"])
            # The instance that served the call (a spare may have started beside it: headroom).
            instances = [i["instance_id"] for i in function["instances"]]
            status, text, served = 0, "", False
            for _ in range(50):  # the handler's print reaches the file as the worker flushes it
                for instance in instances:
                    status, text, _ = await _text(api, f"/v1/functions/talk/instances/{instance}/logs")
                    assert status == 200, text
                    served = served or "saw {'n': 7}" in text
                if served:
                    break
                await asyncio.sleep(0.1)
            assert served
            status, body = await api.call("GET", "/v1/functions/talk/instances/nope/logs")
            assert status == 404 and body["error"]["field"] == "instance"

            workload = await _submit(api, "short", ["sh", "-c", "echo kept"])
            await wait_for(lambda: api.get(f"/v1/workloads/{workload}"), lambda w: w["status"] == "Succeeded")
        # The agent is gone: its node keeps the log, but nobody answers for it now.
        status, body = await api.call("GET", f"/v1/workloads/{workload}/logs")
        assert status == 503 and body["error"]["code"] == "unavailable" and "f1" in body["error"]["message"]
