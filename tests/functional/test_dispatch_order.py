"""A placement round sends its new placements' run commands before it does anything else (the
registry's flush, the read of the other unacknowledged commands): their bytes are on the way to
the agent while the rest of the round runs (real hub, agent and NATS)."""

from __future__ import annotations

from typing import Any

from harness import running_agents, running_hub


async def test_a_new_placements_run_command_is_published_before_the_rest_of_its_round(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["n1"]),
    ):
        hub = running.hub
        order: list[str] = []
        send_command, due, flush = hub.bus.send_command, hub.dispatch.due, hub.registry.flush
        place_pending = hub.placing.place_pending

        async def placing() -> Any:
            written = await place_pending()
            if written:
                order.append("placed")
            return written

        async def sending(cluster: str, node: str, command: Any) -> Any:
            if command.kind == "run":
                order.append("published")
            return await send_command(cluster, node, command)

        async def reading(s: Any) -> Any:
            order.append("due")
            return await due(s)

        async def flushing(store: Any, **kw: Any) -> Any:
            order.append("flush")
            return await flush(store, **kw)

        hub.bus.send_command = sending  # type: ignore[method-assign]
        hub.dispatch.due = reading  # type: ignore[method-assign]
        hub.registry.flush = flushing  # type: ignore[method-assign]
        hub.placing.place_pending = placing  # type: ignore[method-assign]
        workload_id = await api.post_workload({"name": "w", "command": ["true"], "resources": {"cpu": 0.5}})
        assert (await api.wait_status(workload_id, "Succeeded", "Failed"))["status"] == "Succeeded"
        placed = order.index("placed")
        # Published before the rest of the round that placed it (the registry's flush, the read).
        assert order[placed : placed + 4] == ["placed", "published", "flush", "due"], order
        assert order.count("published") == 1, order  # acknowledged: never sent again
