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
        # A placing round may have found no node meanwhile: it says so in message and updated_at.
        moving = {"message", "updated_at"}
        stored = await api.workload(created["id"])
        assert {k: v for k, v in created.items() if k not in moving} == {
            k: v for k, v in stored.items() if k not in moving
        }
        assert created["message"] == "" and created["updated_at"] == created["created_at"]
        status, again = await api.call("POST", "/v1/workloads", body, headers={"Idempotency-Key": "k-1"})
        assert status == 200
        assert {k: v for k, v in again.items() if k not in moving} == {
            k: v for k, v in stored.items() if k not in moving
        }
