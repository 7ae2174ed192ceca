"""Stopping an agent (SIGTERM: ``request_stop``) follows the restart policy of the work it ran.

Real parts: nats-server, the hub with its HTTP API on SQLite, in-process agents (stopped the way
their SIGTERM handler stops them), real ``sleep`` processes. The agent reports what its shutdown
stopped as Failed (reason NodeShutdown) before it exits; the hub fails the workload (``never``) or
places the replica again as a restart (``on-failure``, ``always``).
"""

from __future__ import annotations

from harness import running_agents, running_hub, wait_for

SLEEPY = ["sleep", "30"]


async def test_with_restart_policy_never_the_workload_fails_and_is_not_run_again(
    nats_server, sqlite_url, tmp_path
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        async with running_agents(nats_server.url, tmp_path, ["s1"]) as agents:
            workload_id = await api.post_workload({"name": "sleepy", "command": SLEEPY})
            await api.wait_status(workload_id, "Running")
            await agents[0].stop()
            # Reported before the agent exited: no lease expiry needed.
            done = await api.wait_status(workload_id, "Failed", "Succeeded", "Pending", timeout=3)
        assert done["status"] == "Failed", done
        assert done["message"] == "replica 0 failed: node s1 shut down while it ran (agent stopped)"
        [placement] = done["placements"]
        assert (placement["status"], placement["exit_code"]) == ("Failed", 143)
        async with running_agents(nats_server.url, tmp_path, ["s1"]):
            await wait_for(api.nodes, lambda nodes: [n["status"] for n in nodes] == ["Ready"])
            again = await api.workload(workload_id)
        assert again["status"] == "Failed" and len(again["placements"]) == 1 and again["restarts"] == 0


async def test_with_restart_policy_on_failure_it_runs_again_as_attempt_2_counted_as_a_restart(
    nats_server, sqlite_url, tmp_path
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        async with running_agents(nats_server.url, tmp_path, ["s2"]) as agents:
            body = {"name": "sleepy", "command": SLEEPY, "restart_policy": "on-failure"}
            workload_id = await api.post_workload(body)
            await api.wait_status(workload_id, "Running")
            await agents[0].stop()
            waiting = await api.wait_status(workload_id, "Pending", "Failed", timeout=3)
        assert waiting["status"] == "Pending", waiting
        [first] = waiting["placements"]
        assert (first["status"], first["attempt"]) == ("Lost", 1)
        assert first["message"] == "node s2 shut down while it ran (agent stopped); placed again (restart 1)"
        async with running_agents(nats_server.url, tmp_path, ["s2"]):
            running = await wait_for(
                lambda: api.workload(workload_id),
                lambda w: w["status"] == "Running" and w["restarts"] == 1,
                timeout=10,
            )
        attempts = [(p["attempt"], p["status"], p["restarts"]) for p in running["placements"]]
        assert attempts == [(1, "Lost", 0), (2, "Running", 1)]
        events = (await api.get(f"/v1/events?kind=PlacementRestarted&object_id={workload_id}"))["items"]
        assert events and events[-1]["data"]["restarts"] == 1
