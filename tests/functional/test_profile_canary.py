"""A scheduling profile change rolled out as a canary through the API of a real hub, with real
agents and NATS: a candidate that places nothing (quota bins no node holds) is reverted by the
controller while workloads keep coming, and every workload, those of the canary's share too,
ends Succeeded; a candidate that places as well is promoted and then places everything."""

from __future__ import annotations

import asyncio
from typing import Any

from harness import client_cli, running_agents, running_hub, wait_for, write_admin_config

OVERSIZED = {
    "name": "oversized",
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeResourcesLeastAllocated"},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"cpu_bins": [64.0]},
}
QUICK = {"steps": [50, 100], "threshold": 1.0, "sustain_s": 1.0, "min_samples": 3, "recent": 3}


async def _submit_until(api: Any, done: Any, limit: int = 80) -> list[str]:
    """One small workload every 0.2 s until ``done()`` says so (or ``limit`` were sent)."""
    ids = []
    for i in range(limit):
        ids.append(
            await api.post_workload({"name": f"w{i}", "command": ["true"], "resources": {"cpu": 0.25}})
        )
        if await done():
            break
        await asyncio.sleep(0.2)
    return ids


async def test_a_profile_change_that_places_nothing_is_reverted_and_no_workload_is_lost(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"]),
    ):
        await wait_for(api.nodes, lambda items: len(items) == 2)
        before = await api.get("/v1/scheduling-profiles/current")
        status, started = await api.call(
            "POST", "/v1/scheduling-profiles/canary", {"profile": OVERSIZED, "dwell_s": 120, **QUICK}
        )
        assert status == 201, started
        assert (started["state"], started["fraction"], started["previous"]) == ("canary", 0.5, before["name"])
        assert (await api.get("/v1/scheduling-profiles/current"))["canary"] == "oversized"

        async def ended() -> bool:
            return (await api.get("/v1/scheduling-profiles/canary"))["state"] != "canary"

        ids = await _submit_until(api, ended)
        canary = await wait_for(
            lambda: api.get("/v1/scheduling-profiles/canary"), lambda c: c["state"] != "canary"
        )
        assert canary["state"] == "rolled_back", canary
        rollback = canary["events"][-1]
        assert rollback["kind"] == "rollback" and rollback["canary_score"] > 1.0 >= rollback["control_score"]
        assert rollback["t_s"] < 60  # judged on its waiting workloads, long before its step's dwell
        current = await api.get("/v1/scheduling-profiles/current")
        assert (current["name"], current["canary"]) == (before["name"], None)
        for workload_id in ids:  # the canary's share waited, then the profile in force placed it
            assert (await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30))[
                "status"
            ] == "Succeeded"
        kinds = [e["kind"] for e in (await api.get("/v1/events?kind=ProfileCanaryRolledBack"))["items"]]
        assert kinds == ["ProfileCanaryRolledBack"]
        async with api.session.get(api.base + "/metrics") as response:
            metrics = await response.text()
        assert 'edgeplane_profile_canary_state{profile="oversized",state="rolled_back"} 1.0' in metrics
        assert 'edgeplane_profile_canary_score{group="canary",profile="oversized"}' in metrics
        status, again = await api.call("POST", "/v1/scheduling-profiles/canary", {"profile": before["name"]})
        assert status == 422 and again["error"]["field"] == "profile", again  # already in force


async def test_a_profile_change_that_places_as_well_is_promoted(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"]),
    ):
        await wait_for(api.nodes, lambda items: len(items) == 2)
        home = tmp_path / "home"
        home.mkdir()
        await write_admin_config(running, home)
        (home / "candidate.yaml").write_text("name: default-copy\n" + _yaml_of_default())
        # The client, as an operator runs it (a process of its own; the hub answers meanwhile).
        flags = [
            "--steps",
            "50,100",
            "--dwell",
            "2",
            "--threshold",
            "1",
            "--sustain",
            "1",
            "--min-samples",
            "3",
        ]
        cli = await asyncio.to_thread(client_cli, home, "policy", "profile-canary", "candidate.yaml", *flags)
        assert cli.returncode == 0, cli.stderr
        assert "'default-copy' canary" in cli.stdout and "canary at 50%" in cli.stdout, cli.stdout
        status, second = await api.call("POST", "/v1/scheduling-profiles/canary", {"profile": "binpack"})
        assert status == 409, second  # one at a time

        async def ended() -> bool:
            return (await api.get("/v1/scheduling-profiles/canary"))["state"] != "canary"

        ids = await _submit_until(api, ended)
        canary = await wait_for(
            lambda: api.get("/v1/scheduling-profiles/canary"), lambda c: c["state"] != "canary"
        )
        assert canary["state"] == "promoted", canary
        assert [e["kind"] for e in canary["events"]] == ["start", "step", "promote"]
        assert (await api.get("/v1/scheduling-profiles/current"))["name"] == "default-copy"
        shown = await asyncio.to_thread(client_cli, home, "policy", "profile-canary", "--status")
        assert shown.returncode == 0 and "promoted" in shown.stdout, (shown.stdout, shown.stderr)
        refused = await asyncio.to_thread(client_cli, home, "policy", "profile-canary", "no-such-profile")
        assert refused.returncode != 0 and "not a built-in profile" in refused.stderr, refused.stderr
        later = await api.post_workload({"name": "after", "command": ["true"], "resources": {"cpu": 0.25}})
        for workload_id in [*ids, later]:
            assert (await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30))[
                "status"
            ] == "Succeeded"
    # The promotion outlives the hub: the next one, started with the same --scheduler profile,
    # places with the promoted profile and says so.
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        current = await api.get("/v1/scheduling-profiles/current")
        assert (current["name"], current["origin"], current["canary"]) == ("default-copy", "promoted", None)
        assert (await api.get("/v1/scheduling-profiles/canary"))["state"] == "promoted"


async def test_a_running_profile_canary_outlives_its_hub(nats_server, sqlite_url, tmp_path):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        before = await api.get("/v1/scheduling-profiles/current")
        assert before["origin"] == "started"
        status, started = await api.call(
            "POST", "/v1/scheduling-profiles/canary", {"profile": "default", "dwell_s": 600, **QUICK}
        )
        assert status == 201 and started["fraction"] == 0.5, started
    # The hub stopped mid-canary; the next one goes on with it at the step it reached.
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1", "n2"]),
    ):
        canary = await api.get("/v1/scheduling-profiles/canary")
        assert (canary["state"], canary["fraction"], canary["failure"]) == ("canary", 0.5, ""), canary
        assert [e["kind"] for e in canary["events"]] == ["start"]
        current = await api.get("/v1/scheduling-profiles/current")
        assert (current["name"], current["canary"]) == (before["name"], "default")
        status, second = await api.call("POST", "/v1/scheduling-profiles/canary", {"profile": "binpack"})
        assert status == 409, second  # still one at a time after the restart
        await wait_for(api.nodes, lambda items: len(items) == 2)
        spec = {"command": ["true"], "resources": {"cpu": 0.25}, "sla_latency_s": 30}
        ids = [await api.post_workload({"name": f"r{i}", **spec}) for i in range(6)]
        for workload_id in ids:  # both groups placed: the candidate's share by the candidate
            assert (await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30))[
                "status"
            ] == "Succeeded"
        canary = await api.get("/v1/scheduling-profiles/canary")
        assert canary["samples"]["canary"] + canary["samples"]["control"] >= 1, canary
        # Each one's end against its SLA reached the outcome guard, in its workload's group.
        outcomes = canary["outcome_samples"]
        assert outcomes["canary"] + outcomes["control"] == 6, canary
        assert canary["state"] == "canary", canary  # 30 s of SLA: nothing over it


def _yaml_of_default() -> str:
    """kube-scheduler's default profile as an operator would write it in a file (its plugins)."""
    import yaml

    from controlplane.scheduling.profiles import load_profile

    data = load_profile("default").to_dict()
    data.pop("name", None)
    return yaml.safe_dump(data)
