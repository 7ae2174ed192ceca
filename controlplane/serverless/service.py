"""The hub's serverless side: function registry, cold-start-aware invocation, keep-alive and pre-warm.

:class:`FunctionService` is what the hub and the API hold; it coordinates one collaborator per job:

* :mod:`~controlplane.serverless.registry`: immutable versions; registering the same content again
  is a no-op, new content without a version gets the next number and becomes the one invocations
  use (a roll-out: agents drain the older version's instances).
* :mod:`~controlplane.serverless.invoke`: the router (:mod:`controlplane.serverless.router`) picks a
  node and whether to use a warm instance, wait for a busy one or cold-start; an agent that has no
  subscriber is skipped and the invocation tried once elsewhere; an agent that dies mid-invocation
  ends it with ``agent_lost`` (not retried: it may have had effects). Every request has a deadline.
* :mod:`~controlplane.serverless.warmth`: the instances agents report in their heartbeats plus what
  the hub dispatched since; a :class:`~controlplane.serverless.keepalive.Policy` (``edgeplane`` by
  default: hybrid histogram + call-graph pre-warm + burst pool) sets each instance's keep-alive
  (shorter on battery-powered nodes) and, when it predicts the next arrival is far, lets the
  instance go and pre-warms one shortly before that arrival.
* :mod:`~controlplane.serverless.records`: Idempotency-Keys and asynchronous invocations in the
  store, what becomes of them after a hub restart, and a sweep that writes what a store outage
  kept from being written.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from edgeplane_contract.aio import log_failure, stop_task
from edgeplane_contract.messages import FunctionCode, FunctionInstance, PrewarmAckV1

from controlplane.errors import StoreUnavailableError
from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.estimates import Estimates, FunctionStats
from controlplane.serverless.forecast_live import LiveForecast
from controlplane.serverless.history import InvocationHistory
from controlplane.serverless.invoke import Invoker
from controlplane.serverless.keepalive import Policy
from controlplane.serverless.outcome import InvocationOutcome
from controlplane.serverless.records import InvocationRecords
from controlplane.serverless.registry import FunctionRegistry
from controlplane.serverless.replay import replay_in_slices, stored_arrivals
from controlplane.serverless.retire import Retirements
from controlplane.serverless.settings import ServerlessSettings
from controlplane.serverless.spec import FunctionSpec
from controlplane.serverless.warmth import Warmth
from controlplane.store.models import InvocationRow

__all__ = ["FunctionService", "InvocationOutcome", "ServerlessSettings"]

log = logging.getLogger("edgeplane.hub.functions")


class FunctionService:
    """Serverless functions for one hub; created and started by the hub."""

    def __init__(
        self,
        hub: FunctionHost,
        settings: ServerlessSettings | None = None,
        *,
        on_outcome: Callable[[InvocationOutcome], None] | None = None,
    ) -> None:
        self.hub = hub
        self.settings = settings or ServerlessSettings()
        self.estimates = Estimates()
        self.stats: dict[str, FunctionStats] = {}
        self.counters: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.registry = FunctionRegistry(hub)
        self.warmth = Warmth(
            hub,
            self.settings,
            estimates=self.estimates,
            counters=self.counters,
            resolve=self.registry.resolve,
            spawn=self._spawn,
        )
        self.invoker = Invoker(
            hub,
            self.settings,
            registry=self.registry,
            warmth=self.warmth,
            estimates=self.estimates,
            stats=self.stats,
            counters=self.counters,
            spawn=self._spawn,
            on_outcome=on_outcome,
        )
        self.records = InvocationRecords(hub, registry=self.registry, invoker=self.invoker, spawn=self._spawn)
        self.retirements = Retirements(hub, self.registry, self._spawn)
        self.history = InvocationHistory(hub, self.counters, retention_s=self.settings.invocation_retention_s)
        # Set once the stored arrivals are replayed into the policy (or there was nothing to do).
        self.replayed = asyncio.Event()
        self._started = False
        # The collaborators' state, under the names the hub, the API and tests read.
        self.specs = self.registry.specs
        self.instances = self.warmth.instances
        self.in_flight = self.warmth.in_flight

    @property
    def policy(self) -> Policy:
        """The keep-alive policy in use (replaceable, e.g. by a test)."""
        return self.warmth.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.warmth.policy = policy
        if policy.live_forecast is not None and self._started:
            policy.live_forecast.arm(asyncio.get_running_loop().time())

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._started = True
        forecast = self.warmth.policy.live_forecast
        if forecast is not None:  # before the replay's copy: the copy counts the replayed arrivals
            forecast.arm(asyncio.get_running_loop().time())
        self._spawn(self.history.loop())
        self._spawn(self.records.sweep_loop())
        self._spawn(self._forecast_loop())
        async with self.hub.store.session() as s:
            await self.registry.load(s)
            in_flight, functions = await self.records.resume(s)
        if self.settings.replay_arrivals > 0:
            # The copy and the hold at one moment, before any arrival: none missed, none twice.
            serving = self.warmth.policy
            learned = copy.deepcopy(serving)
            self.warmth.hold_arrivals()
            clock = asyncio.get_running_loop().time()
            self._spawn(self._replay_arrivals(serving, learned, wall=time.time(), clock=clock))
        else:
            self.replayed.set()

        if in_flight:
            log.info(
                "%d invocation(s) were running when the previous hub ended: asking the agents", len(in_flight)
            )
            self._spawn(self.records.recover(in_flight, functions))

    async def _replay_arrivals(self, serving: Policy, learned: Policy, *, wall: float, clock: float) -> None:
        """What the policy learned before this hub started, from the stored arrivals: replayed
        into a copy of the (still empty) policy while the hub serves, then the live arrivals of
        the meantime on top, then the copy in place of the policy (unless it was replaced)."""
        began = time.perf_counter()
        try:
            async with self.hub.store.session() as s:
                arrivals = await stored_arrivals(
                    s,
                    since=wall - self.settings.invocation_retention_s,
                    before=wall,  # those since are live: held, fed below
                    limit=self.settings.replay_arrivals,
                )
            count = await replay_in_slices(learned, arrivals, wall_now=wall, clock_now=clock)
            held = self.warmth.release_arrivals()
            if self.warmth.policy is not serving:
                log.info("keep-alive: the policy was replaced while replaying: the replay is dropped")
                return
            for name, t, exec_s, concurrency in held:
                learned.observe_invocation(name, t, exec_s, concurrency=concurrency)
            self.warmth.policy = learned
            if count.arrivals:
                log.info(
                    "keep-alive: %d stored arrival(s) of %d function(s) replayed in %.2fs",
                    count.arrivals,
                    count.functions,
                    time.perf_counter() - began,
                )
        except StoreUnavailableError as exc:
            log.warning("keep-alive: the stored arrivals could not be read (%s): learning afresh", exc)
        finally:
            self.warmth.release_arrivals()
            self.replayed.set()

    async def _forecast_loop(self) -> None:
        """At each bin's start, the pre-warms the policy's live forecast asks for (none when the
        policy has no forecast: then it looks again every second, the policy may be replaced)."""
        loop = asyncio.get_running_loop()
        while True:
            forecast = self.warmth.policy.live_forecast
            if forecast is None:
                await asyncio.sleep(1.0)
                continue
            # A hair past the boundary, so that the bin holding "now" is the new one.
            await asyncio.sleep(max(0.0, forecast.next_bin_start(loop.time()) - loop.time()) + 0.001)
            if forecast is not self.warmth.policy.live_forecast:
                continue
            now = loop.time()
            if forecast.fit_due(now):
                self._spawn(self._fit_forecast(forecast, forecast.fitting(now)))
            try:
                decisions = forecast.decide(now, lambda name: self.estimates.exec_ms(name) / 1000)
            except Exception:  # a bad bin must not end forecasting for good
                log.exception("forecast pre-warm: no decision this bin")
                continue
            for name, count, hold_s in decisions[: self.settings.forecast_prewarms_per_bin]:
                if name in self.registry.specs:
                    self._spawn(self.warmth.prewarm(name, count=count, reason="forecast", hold_s=hold_s))
            if len(decisions) > self.settings.forecast_prewarms_per_bin:
                log.info(
                    "forecast pre-warm: %d function(s) due this bin, %d asked (forecast_prewarms_per_bin)",
                    len(decisions),
                    self.settings.forecast_prewarms_per_bin,
                )

    async def _fit_forecast(self, forecast: LiveForecast, history: Any) -> None:
        """(Re)fit the learned forecaster in a worker thread (seconds), then put it in place."""
        began = time.perf_counter()
        try:
            model = await asyncio.to_thread(forecast.fit, history)
        except Exception as exc:  # e.g. too little history for the horizon: the next span tries again
            log.warning("forecast pre-warm: not fitted (%s)", exc)
            return
        forecast.use(model)
        log.info(
            "forecast pre-warm: model fitted on %d function(s) x %d bin(s) in %.1fs",
            history.shape[0],
            history.shape[1],
            time.perf_counter() - began,
        )

    async def stop(self) -> None:
        self.warmth.stop()
        for task in list(self._tasks):
            await stop_task(task)
        await self.history.flush()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(log_failure)  # nobody awaits it: its exception must not go unseen
        return task

    # --- what agents tell us --------------------------------------------------------------

    def update_instances(self, node: str, instances: list[FunctionInstance]) -> None:
        self.warmth.update_instances(node, instances)
        self.retirements.heard(node, instances)

    def node_lost(self, node: str) -> None:
        self.warmth.node_lost(node)

    # --- registry -------------------------------------------------------------------------

    async def register(self, spec: FunctionSpec) -> tuple[FunctionSpec, bool]:
        """Store a version; returns (the stored spec, created) (see :meth:`FunctionRegistry.register`)."""
        return await self.registry.register(spec)

    def resolve(self, name: str, version: int | None = None) -> FunctionSpec:
        return self.registry.resolve(name, version)

    async def delete(self, name: str) -> None:
        await self.registry.delete(name)
        self.stats.pop(name, None)
        self.warmth.cancel_prewarm(name)
        self.retirements.deleted(name, self.warmth.instances)

    @staticmethod
    def code_of(spec: FunctionSpec) -> FunctionCode:
        return spec.code()

    def check_event(self, spec: FunctionSpec, event: Any) -> None:
        """Refuse (413) an event that, with the function's code, cannot fit in one NATS message."""
        self.invoker.check_event(spec, event)

    # --- invocation -----------------------------------------------------------------------

    async def invoke(self, name: str, event: Any, *, version: int | None = None) -> InvocationOutcome:
        """A synchronous invocation; its record is kept (``history``) for ``/v1/invocations/{id}``."""
        started_at = time.time()
        outcome = await self.invoker.invoke(name, event, version=version)
        self.history.add(outcome, started_at)
        return outcome

    def _apply_result(
        self, outcome: InvocationOutcome, data: bytes, sent: float, spec: FunctionSpec, node: str
    ) -> None:
        # Kept for tests that feed an agent's raw reply to the service.
        self.invoker.apply_result(outcome, data, sent, spec, node)

    async def prewarm(self, name: str, *, count: int = 1, reason: str = "") -> PrewarmAckV1 | None:
        """Have ``count`` instances of the latest version warm on the best node for a cold start."""
        return await self.warmth.prewarm(name, count=count, reason=reason)

    async def invoke_async(
        self, name: str, event: Any, *, version: int | None = None, idempotency_key: str | None = None
    ) -> tuple[str, bool]:
        """Queue an invocation; (its id, True) or, for a key seen before, (that one's id, False)."""
        return await self.records.invoke_async(name, event, version=version, idempotency_key=idempotency_key)

    async def invoke_once(
        self, name: str, event: Any, *, version: int | None, idempotency_key: str
    ) -> tuple[InvocationOutcome | None, InvocationRow]:
        """A synchronous invocation under an Idempotency-Key (see :meth:`InvocationRecords.invoke_once`)."""
        return await self.records.invoke_once(name, event, version=version, idempotency_key=idempotency_key)
