"""After a hub restart: ask the agents what became of the invocations the previous hub had in
flight, before failing any of them.

An agent keeps a bounded record of the invocations it finished (with their results) and knows
the ones it is running. The restarted hub asks every Ready node (``fn.query``) for the ids it has
as ``Running``: a finished one gets its result, a running one is waited for (until its timeout),
and only one that no node knows after a grace period is failed (``hub_restarted``). Nothing is run
again: an invocation that may have run is never started a second time.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from edgeplane_contract.messages import (
    InvocationQueryV1,
    InvocationStatusV1,
    InvokeResultV1,
    MessageError,
    decode,
    encode,
)

__all__ = ["InFlight", "recover_invocations"]

log = logging.getLogger("edgeplane.functions.recovery")

BATCH = 100  # ids per query


@dataclass(slots=True)
class InFlight:
    """An invocation a previous hub had marked Running: until when it is worth waiting for it."""

    invocation_id: str
    timeout_s: float


async def recover_invocations(
    pending: Iterable[InFlight],
    *,
    nodes: Callable[[], list[tuple[str, str]]],
    subject_of: Callable[[str, str], str],
    request: Callable[[str, str, bytes], Awaitable[bytes]],
    finish: Callable[[str, str, InvokeResultV1], Awaitable[None]],
    fail: Callable[[str, str], Awaitable[None]],
    grace_s: float = 10.0,
    poll_s: float = 0.5,
    margin_s: float = 10.0,
    unknown_reason: str = "the hub restarted during the invocation, and no node knows it",
) -> None:
    """Resolve ``pending`` by asking the nodes; returns when every one is finished or failed.

    ``nodes()``: the (cluster, node) pairs to ask now; ``subject_of(cluster, node)``: their query
    subject; ``request(cluster, subject, payload)``: the reply bytes (raises when nobody answers);
    ``finish(id, node, result)`` and ``fail(id, reason)`` record the outcome. Unknown everywhere
    after ``grace_s``: failed (``unknown_reason``). Seen running: waited for until its timeout plus
    ``margin_s``. (Also used by the sweep of invocations whose outcome a store outage kept from
    being recorded: :meth:`~controlplane.serverless.records.InvocationRecords.sweep`.)
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = {p.invocation_id: p for p in pending}
    running_until: dict[str, float] = {}
    while waiting:
        await asyncio.sleep(poll_s)
        now = loop.time()
        for cluster, node in nodes():
            ids = list(waiting)
            for first in range(0, len(ids), BATCH):
                query = InvocationQueryV1(
                    query_id=uuid.uuid4().hex, invocation_ids=ids[first : first + BATCH]
                )
                try:
                    data = await request(cluster, subject_of(cluster, node), encode(query))
                    status = decode(data, InvocationStatusV1)
                except MessageError as exc:
                    log.warning("node %s answered the invocation query with a malformed reply: %s", node, exc)
                    continue
                except Exception:  # not there (yet): asked again at the next round
                    continue
                for result in status.finished:
                    if result.invocation_id in waiting:
                        waiting.pop(result.invocation_id)
                        running_until.pop(result.invocation_id, None)
                        await finish(result.invocation_id, node, result)
                for invocation_id in status.running:
                    item = waiting.get(invocation_id)
                    if item is not None and invocation_id not in running_until:
                        running_until[invocation_id] = now + item.timeout_s + margin_s
        for invocation_id in list(waiting):
            if invocation_id in running_until:
                if now > running_until[invocation_id]:
                    waiting.pop(invocation_id)
                    await fail(invocation_id, "the invocation did not finish within its timeout")
            elif now - started > grace_s:
                waiting.pop(invocation_id)
                await fail(invocation_id, unknown_reason)
    log.info("invocations in flight when the previous hub ended: resolved in %.1fs", loop.time() - started)
