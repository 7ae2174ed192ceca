"""Invocations kept in the store: Idempotency-Keys, asynchronous invocations, and the ones a hub
restart cut short.

A key seen before returns the earlier invocation instead of running a new one, except when that one
never started anywhere (``no_capacity``, ``unavailable``): its key is freed, so a retry runs it.
After a restart, queued invocations run again (no node had them) and the agents are asked about
the running ones first (:mod:`controlplane.serverless.recovery`).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.messages import InvokeResultV1

from controlplane.errors import EdgeplaneError
from controlplane.hub.nodes import FunctionHost
from controlplane.serverless.invoke import Invoker
from controlplane.serverless.outcome import InvocationOutcome, accept_result
from controlplane.serverless.recovery import InFlight, recover_invocations
from controlplane.serverless.registry import FunctionRegistry
from controlplane.serverless.warmth import Spawn
from controlplane.store.models import InvocationRow

__all__ = ["NEVER_STARTED", "InvocationRecords"]

log = logging.getLogger("edgeplane.hub.functions")

# Failures of an invocation that did not start anywhere: a retry under its Idempotency-Key runs it.
NEVER_STARTED = frozenset({"no_capacity", "unavailable"})


class InvocationRecords:
    """Stored invocations of one hub: idempotent and asynchronous ones, and their recovery."""

    def __init__(
        self, hub: FunctionHost, *, registry: FunctionRegistry, invoker: Invoker, spawn: Spawn
    ) -> None:
        self.hub = hub
        self.registry = registry
        self.invoker = invoker
        self._spawn = spawn

    async def resume(self, s: AsyncSession) -> tuple[list[InFlight], dict[str, tuple[str, int]]]:
        """At the hub's start: run the queued invocations again; returns the ones that were running
        (with their function and version by id), for :meth:`recover`."""
        # Async invocations cut short by a hub restart: queued ones run now (no node had them);
        # for running ones the agents are asked first (serverless/recovery.py).
        in_flight: list[InFlight] = []
        functions: dict[str, tuple[str, int]] = {}
        for invocation in await s.scalars(
            select(InvocationRow).where(InvocationRow.status.in_(("Queued", "Running")))
        ):
            if invocation.status == "Running":
                spec = self.registry.specs.get(invocation.function, {}).get(invocation.version)
                in_flight.append(InFlight(invocation.id, spec.timeout_s if spec is not None else 60.0))
                functions[invocation.id] = (invocation.function, invocation.version)
            else:
                event = invocation.event.get("value")
                self._spawn(self._run_async(invocation.id, invocation.function, invocation.version, event))
        return in_flight, functions

    async def recover(self, in_flight: list[InFlight], functions: dict[str, tuple[str, int]]) -> None:
        """Ask the agents what became of ``in_flight``: keep what they finished, fail what no one knows."""
        hub = self.hub

        def ready_nodes() -> list[tuple[str, str]]:
            return [(n.cluster, n.name) for n in hub.nodes.values() if n.status == "Ready"]

        async def ask(cluster: str, subject: str, payload: bytes) -> bytes:
            return await hub.bus.request(cluster, subject, payload, deadline_s=1.0)

        async def finish(invocation_id: str, node: str, result: InvokeResultV1) -> None:
            function, version = functions[invocation_id]
            outcome = InvocationOutcome(invocation_id, function, version, node, ok=False)
            accept_result(outcome, result)
            outcome.total_ms = outcome.queue_ms + outcome.cold_start_ms + outcome.exec_ms  # the agent's part
            await self._store_outcome(invocation_id, outcome)
            log.info(
                "invocation %s finished on %s while the hub was away: %s",
                invocation_id,
                node,
                "Succeeded" if outcome.ok else "Failed",
            )

        async def fail(invocation_id: str, reason: str) -> None:
            async with hub.store.session() as s:
                row = await s.get(InvocationRow, invocation_id)
                if row is None or row.status != "Running":
                    return
                row.status = "Failed"
                row.error = {"code": "hub_restarted", "message": reason}
                row.finished_at = time.time()
            log.warning("invocation %s failed: %s", invocation_id, reason)

        await recover_invocations(
            in_flight,
            nodes=ready_nodes,
            subject_of=lambda cluster, node: hub.bus.subjects(cluster).invocation_query(node),
            request=ask,
            finish=finish,
            fail=fail,
            grace_s=max(10.0, 2 * max((n.lease_s for n in hub.nodes.values()), default=0.0)),
        )

    async def invoke_async(
        self, name: str, event: Any, *, version: int | None = None, idempotency_key: str | None = None
    ) -> tuple[str, bool]:
        """Queue an invocation; (its id, True) or, for a key seen before, (that one's id, False)."""
        spec = self.registry.resolve(name, version)
        assert spec.version is not None
        self.invoker.check_event(spec, event)
        invocation_id, created = await self._store_invocation(
            name, spec.version, event, "Queued", idempotency_key
        )
        if created:
            self._spawn(self._run_async(invocation_id, name, spec.version, event))
        return invocation_id, created

    async def invoke_once(
        self, name: str, event: Any, *, version: int | None, idempotency_key: str
    ) -> tuple[InvocationOutcome | None, InvocationRow]:
        """A synchronous invocation under an Idempotency-Key: run it and keep its result, or, for a
        key seen before, run nothing and return (None, that invocation as stored)."""
        spec = self.registry.resolve(name, version)
        assert spec.version is not None
        self.invoker.check_event(spec, event)
        invocation_id, created = await self._store_invocation(
            name, spec.version, event, "Running", idempotency_key
        )
        if created:
            outcome = await self.invoker.invoke(
                name, event, version=spec.version, invocation_id=invocation_id
            )
            await self._store_outcome(invocation_id, outcome)
        else:
            outcome = None
        async with self.hub.store.session() as s:
            row = await s.get(InvocationRow, invocation_id)
        assert row is not None
        return outcome, row

    async def _store_invocation(
        self, name: str, version: int, event: Any, status: str, key: str | None
    ) -> tuple[str, bool]:
        """Store a new invocation; with a key already used, the earlier one's id (not created)."""
        if key is not None:
            existing = await self._by_key(key)
            if existing is not None:
                return existing, False
        invocation_id = uuid.uuid4().hex
        try:
            async with self.hub.store.session() as s:
                s.add(
                    InvocationRow(
                        id=invocation_id,
                        function=name,
                        version=version,
                        status=status,
                        event={"value": event},
                        created_at=time.time(),
                        idempotency_key=key,
                    )
                )
        except IntegrityError:  # the same key, at the same moment, from another request
            existing = await self._by_key(key or "")
            if existing is None:
                raise
            return existing, False
        return invocation_id, True

    async def _by_key(self, key: str) -> str | None:
        async with self.hub.store.session() as s:
            found: str | None = await s.scalar(
                select(InvocationRow.id).where(InvocationRow.idempotency_key == key)
            )
        return found

    async def _store_outcome(self, invocation_id: str, outcome: InvocationOutcome) -> None:
        async with self.hub.store.session() as s:
            row = await s.get(InvocationRow, invocation_id)
            if row is None or row.status != "Running":  # gone, or already resolved (recovery)
                return
            row.status = "Succeeded" if outcome.ok else "Failed"
            row.node = outcome.node
            row.cold_start = outcome.cold_start
            row.result = {"value": outcome.result}
            row.error = outcome.error or {}
            row.timings = outcome.timings()
            row.finished_at = time.time()
            if not outcome.ok and (outcome.error or {}).get("code") in NEVER_STARTED:
                # Nothing ran: the key is free again, so the client's retry runs it (as Stripe's
                # idempotency keys keep no result for a request that did not execute).
                row.idempotency_key = None

    async def _run_async(self, invocation_id: str, name: str, version: int, event: Any) -> None:
        async with self.hub.store.session() as s:
            row = await s.get(InvocationRow, invocation_id)
            if row is None:
                return
            row.status = "Running"
        try:
            outcome = await self.invoker.invoke(name, event, version=version, invocation_id=invocation_id)
        except EdgeplaneError as exc:  # deleted meanwhile, or no longer fits (a lower max_payload)
            outcome = InvocationOutcome(
                invocation_id,
                name,
                version,
                None,
                ok=False,
                error={"code": exc.code, "message": exc.message},
            )
        await self._store_outcome(invocation_id, outcome)
