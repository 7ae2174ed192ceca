"""The answer to POST /v1/workloads is the workload as stored (built from the row the hub wrote,
not read back): the same document GET returns while nothing has happened to it yet."""

from __future__ import annotations

from harness import running_hub


async def test_the_created_answer_is_what_get_returns_and_a_retry_with_the_key_returns_the_first(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):  # no node: it stays Pending
        body = {"name": "answer", "command": ["true"], "env": {"A": "1"}, "replicas": 2, "priority": 3}
        status, created = await api.call("POST", "/v1/workloads", body, headers={"Idempotency-Key": "k-1"})
        assert status == 201
        assert created["status"] == "Pending" and created["placements"] == []
        assert created == await api.workload(created["id"])
        status, again = await api.call("POST", "/v1/workloads", body, headers={"Idempotency-Key": "k-1"})
        assert status == 200
        assert again == created
