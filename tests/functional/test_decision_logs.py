"""Collecting the fleet's decision logs (``POST /v1/decision-logs``, ``controlplane policy
collect``) from real agents over NATS: every Ready node's newest entries, rewards noised on the
node for its own epsilon, the silent ones named with the reason."""

from __future__ import annotations

import asyncio
import json

from harness import client_cli, running_agents, running_hub, wait_for, write_admin_config

from edgeplane_contract.messages import Subjects


async def _bid_on_both(api, n: int = 3) -> None:
    """Work that goes through bid rounds (each asks both nodes' local policies)."""
    await wait_for(api.nodes, lambda ns: len(ns) == 2 and all(x["telemetry"].get("policy") for x in ns))
    ids = [
        await api.post_workload(
            {"name": f"bid-{i}", "command": ["true"], "resources": {"cpu": 1, "memory": "64Mi"}}
        )
        for i in range(n)
    ]
    for workload_id in ids:
        await api.wait_status(workload_id, "Succeeded")


async def test_the_fleets_logs_come_back_noised_per_node_and_limited(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path / "a", ["d1"], privacy_epsilon=0.5) as first,
        running_agents(nats_server.url, tmp_path / "b", ["d2"], privacy_epsilon=4.0) as second,
    ):
        await _bid_on_both(api)
        status, logs = await api.call("POST", "/v1/decision-logs", {})
        assert status == 200, logs
        assert logs["missing"] == []
        by_node = {n["node"]: n for n in logs["nodes"]}
        assert set(by_node) == {"d1", "d2"}
        assert (by_node["d1"]["epsilon"], by_node["d2"]["epsilon"]) == (0.5, 4.0)
        assert logs["entries"] == sum(len(n["entries"]) for n in logs["nodes"]) >= 2
        exact = {e.request_id: e.expected_reward for h in first + second for e in h.agent.decisions.entries}
        for node in logs["nodes"]:
            assert node["entries"] and not node["truncated"]
            for entry in node["entries"]:
                assert entry["request_id"] in exact and entry["purpose"] == "bid"
                assert entry["expected_reward"] != exact[entry["request_id"]], "rewards leave the node noised"

        status, one = await api.call("POST", "/v1/decision-logs", {"limit": 1, "nodes": ["d2"]})
        assert status == 200, one
        assert [(n["node"], len(n["entries"])) for n in one["nodes"]] == [("d2", 1)]
        newest = second[0].agent.decisions.entries[-1].request_id
        assert one["nodes"][0]["entries"][0]["request_id"] == newest

        status, bad = await api.call("POST", "/v1/decision-logs", {"limit": 0})
        assert status == 422 and bad["error"]["field"] == "limit", bad
        status, bad = await api.call("POST", "/v1/decision-logs", {"nodes": ["nowhere"]})
        assert status == 422 and bad["error"]["field"] == "nodes", bad
        status, bad = await api.call("POST", "/v1/decision-logs", {"limit": 5, "colour": "red"})
        assert status == 422 and bad["error"]["field"] == "colour", bad


async def test_a_silent_node_is_named_and_the_others_still_answer(nats_server, sqlite_url, tmp_path):
    """A node that stopped answering (its decisions subject gone quiet) is listed with the reason
    within the deadline; a node's nonsense answer is counted as malformed, not passed on."""
    import nats

    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["s1", "s2"]),
    ):
        await _bid_on_both(api, n=1)
        # An impostor answers for s2 first with a body that names another node; s2's own answer
        # also comes, and the first answer to arrive wins: run until the impostor's is taken.
        nc = await nats.connect(nats_server.url)
        try:

            async def impostor(msg) -> None:
                await msg.respond(json.dumps({"v": 1, "node": "s1", "epsilon": 1, "entries": []}).encode())

            await nc.subscribe(Subjects("default").node("s2", "decisions"), cb=impostor)
            await nc.flush()
            before = running.hub.bus.malformed["decisions"]
            reasons = []
            for _ in range(20):
                status, logs = await api.call("POST", "/v1/decision-logs", {"deadline_s": 2})
                assert status == 200 and [n["node"] for n in logs["nodes"]][:1] == ["s1"], logs
                reasons += [m["reason"] for m in logs["missing"] if m["node"] == "s2"]
                if reasons:
                    break
            assert reasons and reasons[0].startswith("malformed answer: answered for node 's1'"), reasons
            assert running.hub.bus.malformed["decisions"] > before
            # One node's log (GET) is checked the same way: the impostor's answer is a 503 that
            # says why, never handed on; s2's own answer, when it wins, comes back typed.
            seen = set()
            for _ in range(40):
                status, body = await api.call("GET", "/v1/nodes/s2/decisions")
                if status == 503:
                    message = body["error"]["message"]
                    assert message.startswith("node s2: malformed answer: answered for node"), body
                else:
                    assert status == 200 and body["node"] == "s2" and "v" not in body, body
                    assert set(body) == {"node", "epsilon", "truncated", "entries"}, body
                seen.add(status)
                if seen == {200, 503}:
                    break
            assert 503 in seen, seen
        finally:
            await nc.close()


async def test_policy_collect_writes_one_json_line_per_decision(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["c1", "c2"], privacy_epsilon=2.0),
    ):
        await _bid_on_both(api, n=2)
        await write_admin_config(running, tmp_path)
        done = await asyncio.to_thread(client_cli, tmp_path, "policy", "collect", "--out", "field.jsonl")
        assert done.returncode == 0, done.stderr
        lines = (tmp_path / "field.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        assert rows and {r["node"] for r in rows} == {"c1", "c2"}
        assert all(r["epsilon"] == 2.0 and "expected_reward" in r and "offer" in r for r in rows)
        assert done.stdout.startswith(f"collected {len(rows)} decisions from 2 node(s) into field.jsonl")
        bad = await asyncio.to_thread(
            client_cli, tmp_path, "policy", "collect", "--out", "x.jsonl", "--limit", "0"
        )
        assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "limit" in bad.stderr


async def test_an_agent_fits_its_answer_in_one_message_and_drops_a_bad_limit(
    nats_server, sqlite_url, tmp_path
):
    """The newest entries that fit one NATS message come back (``truncated`` says fewer than
    asked); a request with a limit that is not an integer from 1 to 10000 is counted as
    malformed and gets no answer."""
    import nats

    from edge_agent.bids import _newest_that_fit
    from edge_agent.decisions import LoggedDecision

    entries = [json.dumps({"request_id": f"r{i}", "pad": "x" * 100}) for i in range(10)]
    one = len(entries[0]) + 2
    assert _newest_that_fit(entries, 3 * one) == entries[-3:]
    assert _newest_that_fit(entries, one - 1) == []
    assert _newest_that_fit(entries, 100 * one) == entries

    async with (
        running_hub(nats_server.url, sqlite_url),
        running_agents(nats_server.url, tmp_path, ["t1"]) as (handle,),
    ):
        log = handle.agent.decisions
        for i in range(3000):  # about 0.5 kB each: far over the server's 1 MB max payload
            log.add(
                LoggedDecision(
                    t=float(i), request_id=f"q{i}", workload_id="w", replica=0, state={"pad": "y" * 300},
                    offer={"cpu": 1.0}, weights=[1.0, 2.0, 1.0, 4.0], action=1, decline=False,
                    expected_reward=0.5, source="test",
                )
            )  # fmt: skip
        nc = await nats.connect(nats_server.url)
        try:
            subject = Subjects("default").node("t1", "decisions")
            reply = json.loads((await nc.request(subject, b'{"limit": 3000}', timeout=5)).data)
            assert reply["truncated"] and 0 < len(reply["entries"]) < 3000
            assert reply["entries"][-1]["request_id"] == "q2999"  # the newest kept
            before = handle.agent.counters["malformed_messages"]
            for bad in (b'{"limit": "many"}', b'{"limit": 0}', b"[1]", b"not json"):
                try:
                    await nc.request(subject, bad, timeout=0.5)
                    raise AssertionError(f"{bad!r} was answered")
                except nats.errors.TimeoutError:
                    pass
            assert handle.agent.counters["malformed_messages"] == before + 4
        finally:
            await nc.close()
