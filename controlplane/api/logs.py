"""Logs through the API: a workload replica's output and a function instance's stderr, fetched
from the node that keeps them in bounded chunks (``controlplane.hub.logs``); ``follow=1`` streams
until the placement ends or the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from edgeplane_contract.logs import MAX_LOG_CHUNK, MAX_TAIL_LINES

from controlplane.api.keys import HUB
from controlplane.api.params import Flag, IntQuery
from controlplane.errors import NotFoundError, UnavailableError
from controlplane.hub.lifecycle import TERMINAL
from controlplane.hub.logs import LogSource
from controlplane.store.models import PlacementRow

__all__ = ["FOLLOW", "LIMIT_BYTES", "REPLICA", "TAIL", "routes"]

routes = web.RouteTableDef()

TAIL = IntQuery("tail", 0, MAX_TAIL_LINES)
FOLLOW = Flag("follow", ("1", "true"))
REPLICA = IntQuery("replica", 0, 999, 0)
LIMIT_BYTES = IntQuery("limit_bytes", 1, 64 * 2**20, 2**20)
FOLLOW_POLL_S = 0.5
# A followed node that stops answering for this long ends the stream (it may come back: follow again).
FOLLOW_SILENCE_S = 30.0

LOG_HEADERS = {
    "X-Edgeplane-Node": "the node that keeps the log",
    "X-Edgeplane-Log-Next-Offset": "the byte offset after this answer (logical: counts dropped bytes)",
    "X-Edgeplane-Log-Dropped": "bytes at the log's start the node no longer keeps (size limit)",
    "X-Edgeplane-Log-Truncated": "true when the log goes on past limit_bytes",
}


@routes.get("/v1/workloads/{id}/logs")
async def workload_logs(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    workload_id = request.match_info["id"]
    replica = REPLICA.parse(request)
    assert replica is not None  # has a default
    found = await hub.store.get_workload(workload_id)
    if found is None:
        raise NotFoundError(f"workload {workload_id!r} not found", field="id")
    row, placements = found
    attempts = [p for p in placements if p.replica == replica]
    if replica >= row.replicas:
        raise NotFoundError(f"the workload has {row.replicas} replica(s)", field="replica")
    if not attempts:
        raise NotFoundError(f"replica {replica} has not been placed yet ({row.status})", field="replica")
    placement = max(attempts, key=lambda p: p.attempt)
    source = LogSource(
        hub.bus, cluster=placement.cluster, node=placement.node, source="placement", log_id=placement.id
    )

    async def ended() -> bool:
        async with hub.store.session() as s:
            current = await s.get(PlacementRow, placement.id)
        return current is None or current.status in TERMINAL

    return await _serve(request, source, ended)


@routes.get("/v1/functions/{name}/instances/{instance}/logs")
async def function_instance_logs(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    name, instance_id = request.match_info["name"], request.match_info["instance"]
    hub.functions.resolve(name)  # 404 for an unknown function
    node = next(
        (
            node
            for node, instances in hub.functions.instances.items()
            if instance_id in instances and instances[instance_id].function == name
        ),
        None,
    )
    if node is None:
        raise NotFoundError(
            f"function {name!r} has no running instance {instance_id!r} (an ended instance's log stays "
            "on its node until the agent's retention deletes it)",
            field="instance",
        )
    live = hub.nodes.get(node)
    if live is None:
        raise NotFoundError(f"instance {instance_id!r} is on unknown node {node!r}", field="instance")
    source = LogSource(hub.bus, cluster=live.cluster, node=node, source="function", log_id=instance_id)

    async def ended() -> bool:
        return instance_id not in hub.functions.instances.get(node, {})

    return await _serve(request, source, ended)


async def _serve(
    request: web.Request, source: LogSource, ended: Callable[[], Awaitable[bool]]
) -> web.StreamResponse:
    tail = TAIL.parse(request)
    limit = LIMIT_BYTES.parse(request)
    assert limit is not None  # has a default
    first = await source.chunk(max_bytes=min(limit, MAX_LOG_CHUNK), tail_lines=tail)
    if not first.found:
        raise NotFoundError(
            f"node {source.node!r} keeps no log of {source.log_id!r} (not started yet, or deleted by "
            "its retention)",
            field="id",
        )
    headers = {"X-Edgeplane-Node": source.node, "X-Edgeplane-Log-Dropped": str(first.dropped)}
    if FOLLOW.parse(request):
        return await _follow(request, source, first.data, first.next_offset, ended, headers)
    parts, offset, size = [first.data], first.next_offset, first.size
    for _ in range(limit // 1024 + 2):  # each round adds a chunk or ends; bounded either way
        taken = offset - first.offset  # the log's bytes read so far (what limit_bytes counts)
        if offset >= size or taken >= limit or tail is not None:
            break
        chunk = await source.chunk(offset=offset, max_bytes=min(limit - taken, MAX_LOG_CHUNK))
        if not chunk.found or chunk.next_offset == offset:
            break
        parts.append(chunk.data)
        offset, size = chunk.next_offset, chunk.size
    headers["X-Edgeplane-Log-Next-Offset"] = str(offset)
    headers["X-Edgeplane-Log-Truncated"] = "true" if offset < size else "false"
    return web.Response(text="".join(parts), content_type="text/plain", charset="utf-8", headers=headers)


async def _follow(
    request: web.Request,
    source: LogSource,
    data: str,
    offset: int,
    ended: Callable[[], Awaitable[bool]],
    headers: dict[str, str],
) -> web.StreamResponse:
    """Stream from ``offset`` until the log's owner ended and its log is drained, the node stays
    silent for FOLLOW_SILENCE_S, or the client goes (aiohttp then cancels this handler)."""
    response = web.StreamResponse(headers={**headers, "Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    if data:
        await response.write(data.encode())
    loop = asyncio.get_running_loop()
    heard = loop.time()
    while loop.time() - heard < FOLLOW_SILENCE_S:
        finished = await ended()  # asked before reading: what it wrote before ending is read after
        try:
            chunk = await source.chunk(offset=offset, max_bytes=MAX_LOG_CHUNK, deadline_s=2.0)
        except UnavailableError:
            await asyncio.sleep(FOLLOW_POLL_S)
            continue
        heard = loop.time()
        if not chunk.found:
            break
        if chunk.data:
            await response.write(chunk.data.encode())
        drained = chunk.next_offset >= chunk.size
        offset = chunk.next_offset
        if drained and finished:
            break
        if drained:
            await asyncio.sleep(FOLLOW_POLL_S)
    await response.write_eof()
    return response
