"""Invocations kept in the store: Idempotency-Keys, asynchronous invocations, and the ones a hub
restart cut short.

A key seen before returns the earlier invocation instead of running a new one, except when that one
never started anywhere (``no_capacity``, ``unavailable``): its key is freed, so a retry runs it.
After a restart, queued invocations run again (no node had them) and the agents are asked about
the running ones first (:mod:`controlplane.serverless.recovery`).

A store outage strands nothing: every write on the invocation path is retried with back-off
(:func:`~controlplane.store.retry.retry_store`); an outcome that still could not be written is kept
in memory, and a sweep writes it once the store is back, starts the asynchronous invocations that
could not be marked ``Running``, and resolves a ``Running`` one that is well past its timeout with
no outcome here by asking the nodes, as after a restart (failed ``timeout`` when no node knows it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.messages import InvokeResultV1

from controlplane.errors import EdgeplaneError
from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.history import finished_row
from controlplane.serverless.invoke import COLD_START_BUDGET_S, Invoker
from controlplane.serverless.outcome import InvocationOutcome, accept_result
from controlplane.serverless.recovery import InFlight, recover_invocations
from controlplane.serverless.registry import FunctionRegistry
from controlplane.serverless.warmth import Spawn
from controlplane.store.models import InvocationRow
from controlplane.store.retry import retry_store, store_unavailable

__all__ = ["NEVER_STARTED", "InvocationRecords"]

log = logging.getLogger("edgeplane.hub.functions")

# Failures of an invocation that did not start anywhere: a retry under its Idempotency-Key runs it.
NEVER_STARTED = frozenset({"no_capacity", "unavailable", "not_started"})
# How long a write is retried while the store is away: on a request's path (its caller waits; then
# 503, or for a finished synchronous invocation its answer anyway) and in the background (then the
# sweep takes over).
REQUEST_RETRY_S = 5.0
BACKGROUND_RETRY_S = 30.0
# How often the sweep runs, and how long past its timeout (and cold-start budget) a Running
# invocation with no outcome in this hub waits before the sweep asks the nodes about it.
SWEEP_EVERY_S = 5.0
STALE_AFTER_S = 30.0


class InvocationRecords:
    """Stored invocations of one hub: idempotent and asynchronous ones, and their recovery."""

    def __init__(
        self, hub: FunctionHost, *, registry: FunctionRegistry, invoker: Invoker, spawn: Spawn
    ) -> None:
        self.hub = hub
        self.registry = registry
        self.invoker = invoker
        self._spawn = spawn
        # Invocations this hub is running now (the sweep leaves them alone).
        self._active: set[str] = set()
        # Finished, but their outcome not stored yet (the store was away): written by the sweep.
        self._unstored: dict[str, InvocationOutcome] = {}
        # Queued ones that could not be marked Running (the store was away): started by the sweep.
        self._unstarted: dict[str, tuple[str, int, Any]] = {}
        # Running ones the sweep is asking the nodes about.
        self._resolving: set[str] = set()

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
                self._start_async(invocation.id, invocation.function, invocation.version, event)
        return in_flight, functions

    async def recover(
        self,
        in_flight: list[InFlight],
        functions: dict[str, tuple[str, int]],
        *,
        code: str = "hub_restarted",
        unknown: str = "the hub restarted during the invocation, and no node knows it",
    ) -> None:
        """Ask the agents what became of ``in_flight``: keep what they finished, fail what no one
        knows (``code``, with ``unknown`` as the reason)."""
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
            await self._keep_outcome(invocation_id, outcome, within_s=BACKGROUND_RETRY_S)
            log.info(
                "invocation %s finished on %s while the hub was away: %s",
                invocation_id,
                node,
                "Succeeded" if outcome.ok else "Failed",
            )

        async def fail(invocation_id: str, reason: str) -> None:
            async def write() -> None:
                async with hub.store.session() as s:
                    row = await s.get(InvocationRow, invocation_id)
                    if row is None or row.status != "Running":
                        return
                    row.status = "Failed"
                    row.error = {"code": code, "message": reason}
                    row.finished_at = time.time()

            try:
                await retry_store(write, within_s=BACKGROUND_RETRY_S)
            except Exception as exc:
                if not store_unavailable(exc):
                    raise
                return  # still Running in the store: the sweep asks again once it is back
            log.warning("invocation %s failed: %s", invocation_id, reason)

        await recover_invocations(
            in_flight,
            nodes=ready_nodes,
            subject_of=lambda cluster, node: hub.bus.subjects(cluster).invocation_query(node),
            request=ask,
            finish=finish,
            fail=fail,
            grace_s=max(10.0, 2 * max((n.lease_s for n in hub.nodes.values()), default=0.0)),
            unknown_reason=unknown,
        )

    async def invoke_async(
        self, name: str, event: Any, *, version: int | None = None, idempotency_key: str | None = None
    ) -> tuple[str, bool]:
        """Queue an invocation; (its id, True) or, for a key seen before, (that one's id, False)."""
        spec = self.registry.resolve(name, version)
        assert spec.version is not None
        number = spec.version
        self.invoker.check_event(spec, event)
        new_id = uuid.uuid4().hex  # chosen once: a retried insert whose first commit did happen finds it
        invocation_id, created = await retry_store(
            lambda: self._store_invocation(
                name, number, event, "Queued", idempotency_key, invocation_id=new_id
            ),
            within_s=REQUEST_RETRY_S,
        )
        if created:
            self._start_async(invocation_id, name, spec.version, event)
        return invocation_id, created

    async def invoke_once(
        self, name: str, event: Any, *, version: int | None, idempotency_key: str
    ) -> tuple[InvocationOutcome | None, InvocationRow]:
        """A synchronous invocation under an Idempotency-Key: run it and keep its result, or, for a
        key seen before, run nothing and return (None, that invocation as stored)."""
        spec = self.registry.resolve(name, version)
        assert spec.version is not None
        number = spec.version
        self.invoker.check_event(spec, event)
        new_id = uuid.uuid4().hex  # chosen once: a retried insert whose first commit did happen finds it
        invocation_id, created = await retry_store(
            lambda: self._store_invocation(
                name, number, event, "Running", idempotency_key, invocation_id=new_id
            ),
            within_s=REQUEST_RETRY_S,
        )
        if not created:
            async with self.hub.store.session() as s:
                row = await s.get(InvocationRow, invocation_id)
            assert row is not None
            return None, row
        self._active.add(invocation_id)
        try:
            outcome = await self.invoker.invoke(
                name, event, version=spec.version, invocation_id=invocation_id
            )
            # The handler ran: its result is answered even if the store cannot take it now (kept
            # in memory and written by the sweep).
            await self._keep_outcome(invocation_id, outcome, within_s=REQUEST_RETRY_S)
        finally:
            self._active.discard(invocation_id)
        # For its caller: it may not be in the store yet.
        return outcome, finished_row(outcome, created_at=time.time())

    async def _store_invocation(
        self,
        name: str,
        version: int,
        event: Any,
        status: str,
        key: str | None,
        *,
        invocation_id: str | None = None,
    ) -> tuple[str, bool]:
        """Store a new invocation; with a key already used, the earlier one's id (not created)."""
        if key is not None:
            existing = await self._by_key(key)
            if existing is not None:
                return existing, existing == invocation_id  # ours: a retry after a lost commit ack
        invocation_id = invocation_id or uuid.uuid4().hex
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
            if await self._exists(invocation_id):  # or this id: a retry after a lost commit ack
                return invocation_id, True
            existing = await self._by_key(key or "")
            if existing is None:
                raise
            return existing, False
        return invocation_id, True

    async def _exists(self, invocation_id: str) -> bool:
        async with self.hub.store.session() as s:
            return await s.get(InvocationRow, invocation_id) is not None

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

    def _start_async(self, invocation_id: str, name: str, version: int, event: Any) -> None:
        self._active.add(invocation_id)  # before the task starts: the sweep must not start it too
        self._spawn(self._run_async(invocation_id, name, version, event))

    async def _mark_running(self, invocation_id: str) -> bool:
        """Queued -> Running (idempotent: a retry after a lost commit ack finds it Running);
        False when it is gone or already ended."""
        async with self.hub.store.session() as s:
            row = await s.get(InvocationRow, invocation_id)
            if row is None or row.status not in ("Queued", "Running"):
                return False
            row.status = "Running"
        return True

    async def _run_async(self, invocation_id: str, name: str, version: int, event: Any) -> None:
        try:
            try:
                started = await retry_store(
                    lambda: self._mark_running(invocation_id), within_s=BACKGROUND_RETRY_S
                )
            except Exception as exc:
                if not store_unavailable(exc):
                    raise
                # Not marked Running, so not run (a restart would run it again): the sweep starts it.
                self._unstarted[invocation_id] = (name, version, event)
                return
            if not started:
                return
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
            await self._keep_outcome(invocation_id, outcome, within_s=BACKGROUND_RETRY_S)
        finally:
            self._active.discard(invocation_id)

    async def _keep_outcome(self, invocation_id: str, outcome: InvocationOutcome, *, within_s: float) -> None:
        """Store ``outcome``, retrying while the store is away; still away after ``within_s``: kept
        in memory for the sweep (never dropped)."""
        try:
            await retry_store(lambda: self._store_outcome(invocation_id, outcome), within_s=within_s)
        except Exception as exc:
            if not store_unavailable(exc):
                raise
            if not self._unstored:
                log.warning(
                    "the store is away: invocation outcomes kept in memory until it is back (%s)", exc
                )
            self._unstored[invocation_id] = outcome

    # --- the sweep ------------------------------------------------------------------------

    async def sweep_loop(self, every_s: float | None = None) -> None:
        """Run :meth:`sweep` every ``every_s`` (``SWEEP_EVERY_S``) until cancelled."""
        every_s = every_s or SWEEP_EVERY_S
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep()
            except Exception as exc:
                if not store_unavailable(exc):
                    log.exception("invocation sweep failed; retrying in %.0fs", every_s)

    async def sweep(self, *, now: float | None = None) -> None:
        """Write the outcomes kept in memory, start the invocations that could not be marked
        Running, and have the nodes asked about Running ones long past their timeout with no
        outcome here. Raises StoreUnavailableError while the store is still away."""
        if self._unstored:
            for invocation_id, outcome in list(self._unstored.items()):
                await self._store_outcome(invocation_id, outcome)
                del self._unstored[invocation_id]
            log.info("the store is back: invocation outcomes kept in memory are written")
        for invocation_id, (name, version, event) in list(self._unstarted.items()):
            del self._unstarted[invocation_id]
            self._start_async(invocation_id, name, version, event)
        now = time.time() if now is None else now
        busy = self._active | self._resolving | set(self._unstored)
        columns = (InvocationRow.id, InvocationRow.function, InvocationRow.version, InvocationRow.created_at)
        async with self.hub.store.session() as s:
            running = list(
                await s.execute(
                    select(*columns).where(
                        InvocationRow.status == "Running",
                        InvocationRow.created_at < now - COLD_START_BUDGET_S - STALE_AFTER_S,
                    )
                )
            )
        stale: list[InFlight] = []
        functions: dict[str, tuple[str, int]] = {}
        for invocation_id, function, version, created_at in running:
            spec = self.registry.specs.get(function, {}).get(version)
            timeout_s = spec.timeout_s if spec is not None else 60.0
            if invocation_id in busy or now < created_at + timeout_s + COLD_START_BUDGET_S + STALE_AFTER_S:
                continue
            stale.append(InFlight(invocation_id, timeout_s))
            functions[invocation_id] = (function, version)
        if stale:
            log.warning(
                "%d invocation(s) Running past their timeout with no outcome: asking the nodes", len(stale)
            )
            self._resolving |= set(functions)
            self._spawn(self._resolve(stale, functions))

    async def _resolve(self, stale: list[InFlight], functions: dict[str, tuple[str, int]]) -> None:
        try:
            await self.recover(
                stale,
                functions,
                code="timeout",
                unknown="the invocation's outcome was not recorded and no node knows it",
            )
        finally:
            self._resolving -= set(functions)
