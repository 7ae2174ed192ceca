"""An invocation its node handed to no worker ran nowhere: ``not_started`` (retryable), tried on
another node, never ``instance_crashed``."""

from __future__ import annotations

from harness import running_agents, running_hub

# A worker that says it is ready but has closed its input: the agent cannot hand it anything.
DEAF_WORKER = ["sh", "-c", "exec 0<&-; echo '{\"ready\": true}'; exec sleep 30"]


async def test_an_invocation_no_worker_received_fails_not_started_after_trying_every_node(
    nats_server, sqlite_url, tmp_path
):
    """Was: 502 ``instance_crashed`` (as if it had run and crashed): a client could not tell that
    it is safe to retry. Now both nodes are tried and the answer is 503 ``not_started``."""
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"]),
    ):
        body = {"name": "deaf", "runtime": "command", "command": DEAF_WORKER, "timeout_s": 5}
        assert (await api.call("POST", "/v1/functions", body))[0] == 201
        status, answer = await api.call("POST", "/v1/functions/deaf/invoke", 1, timeout_s=30)
        assert status == 503, (status, answer)
        assert answer["error"]["code"] == "not_started" and answer["error"]["type"] == "NotStarted", answer
        assert running.hub.functions.counters["not_started_retried"] == 2  # n1 and n2 each once
