"""Function invocations placed on this node: each run in its own task and answered on the bus, a
durable record of finished ones for a restarted hub that asks (fn.query), and pre-warm requests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from edgeplane_contract.messages import (
    InvocationQueryV1,
    InvocationStatusV1,
    InvokeResultV1,
    InvokeV1,
    MessageError,
    PrewarmAckV1,
    PrewarmV1,
    RetireAckV1,
    RetireV1,
    decode,
    encode,
)
from edgeplane_contract.transport import PAYLOAD_MARGIN

from edge_agent.functions.pool import FunctionPool
from edge_agent.hub_link import HubLink
from edge_agent.invocation_record import FinishedInvocations

__all__ = ["INVOCATIONS_FILE", "Invocations"]

log = logging.getLogger("edgeplane.agent")

INVOCATIONS_FILE = "invocations.sqlite3"
# The record of finished invocations a restarted hub may ask for: at most this many, this large.
INVOCATIONS_KEPT = 2000
INVOCATION_BYTES_KEPT = 64 * 2**20


class Invocations:
    """Handles ``invoke``, ``invocation_query`` and ``prewarm`` messages for the function pool."""

    def __init__(
        self,
        *,
        work_dir: Path,
        functions: FunctionPool,
        link: HubLink,
        counters: Counter[str],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
    ) -> None:
        self.functions = functions
        self.link = link
        self.counters = counters
        self.spawn = spawn
        # Invocations running now, and a bounded record of finished ones with their results: what
        # a restarted hub asks for (fn.query) before it fails anything.
        self._running: set[str] = set()
        self._done = FinishedInvocations(
            work_dir / INVOCATIONS_FILE,
            max_count=INVOCATIONS_KEPT,
            max_bytes=INVOCATION_BYTES_KEPT,
        )

    def close(self) -> None:
        self._done.close()

    async def on_invoke(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, InvokeV1)
        except MessageError as exc:
            self.link.malformed("invoke", exc)
            if msg.reply:
                error = {"type": "BadRequest", "message": str(exc), "code": "bad_message"}
                with contextlib.suppress(Exception):
                    await msg.respond(encode(InvokeResultV1(invocation_id="", ok=False, error=error)))
            return
        # Each invocation runs in its own task so that one slow function never blocks the others.
        self.spawn(self._invoke_and_reply(msg, request))

    async def _invoke_and_reply(self, msg: Msg, request: InvokeV1) -> None:
        self.counters["invocations"] += 1
        self._running.add(request.invocation_id)
        try:
            result = await self.functions.invoke(request)
        except Exception as exc:
            log.exception("invocation %s failed in the agent", request.invocation_id)
            error = {"type": type(exc).__name__, "message": str(exc), "code": "agent_error"}
            result = InvokeResultV1(invocation_id=request.invocation_id, ok=False, error=error)
        finally:
            self._running.discard(request.invocation_id)
        payload = encode(result)
        limit = self.link.max_payload()
        if len(payload) > limit:
            # The reply cannot cross the bus: say so, instead of leaving the caller to time out.
            error = {
                "type": "ResultTooLarge",
                "code": "result_too_large",
                "message": f"the result is {len(payload)} bytes encoded; one NATS message carries {limit}",
            }
            result = dataclasses.replace(result, ok=False, result=None, error=error)
            payload = encode(result)
        # Kept for a hub that asks later (on disk before the answer goes: it outlives this process).
        await self._done.record(result, payload)
        await self.link.respond(msg, payload)

    async def on_invocation_query(self, msg: Msg) -> None:
        try:
            query = decode(msg.data, InvocationQueryV1)
        except MessageError as exc:
            self.link.malformed("invocation_query", exc)
            return
        self.link.heard_hub()
        reply = InvocationStatusV1(query_id=query.query_id)
        limit = self.link.max_payload() - PAYLOAD_MARGIN
        size = len(encode(reply)) + 64 * len(query.invocation_ids)
        for invocation_id in query.invocation_ids[:1000]:
            if invocation_id in self._running:
                reply.running.append(invocation_id)
                continue
            done = self._done.get(invocation_id)
            if done is None:
                continue
            result, result_size = done
            if size + result_size > limit:
                reply.deferred.append(invocation_id)
            else:
                reply.finished.append(result)
                size += result_size
        await self.link.reply(msg, reply)

    async def on_retire(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, RetireV1)
        except MessageError as exc:
            self.link.malformed("retire", exc)
            return
        self.link.heard_hub()
        stopped, draining = await self.functions.retire(request.function)
        if stopped or draining:
            log.info(
                "function %s deleted: %d instance(s) stopped, %d finishing",
                request.function,
                stopped,
                draining,
            )
        await self.link.reply(
            msg, RetireAckV1(request_id=request.request_id, stopped=stopped, draining=draining)
        )

    async def on_prewarm(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, PrewarmV1)
        except MessageError as exc:
            self.link.malformed("prewarm", exc)
            return
        try:
            started = await self.functions.prewarm(request)
            ack = PrewarmAckV1(request_id=request.request_id, started=started)
        except Exception as exc:
            log.exception("prewarm of %s failed", request.code.name)
            ack = PrewarmAckV1(request_id=request.request_id, started=0, reason=str(exc))
        await self.link.reply(msg, ack)
