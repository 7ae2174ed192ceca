"""Warm instances: where they are, how long to keep them and when to pre-warm one.

Instances are known from the agents' heartbeats plus what the hub dispatched since. The keep-alive
:class:`~controlplane.serverless.keepalive.Policy` learns from every arrival; it sets each
instance's keep-alive (shorter on battery-powered nodes) and, when it predicts the next arrival is
far, lets the instance go and has one pre-warmed shortly before that arrival (a timer per function).
When an arrival takes the last free instance and the policy's headroom predictor expects the next
one to overlap, a spare instance is started at once and held briefly (:meth:`Warmth.spare_hold_s`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from edgeplane_contract.messages import (
    FunctionInstance,
    InvokeResultV1,
    PrewarmAckV1,
    PrewarmV1,
    decode,
    encode,
)

from controlplane.errors import NotFoundError
from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.estimates import Estimates
from controlplane.serverless.keepalive import Policy
from controlplane.serverless.placement import node_options, unplaceable_reason
from controlplane.serverless.router import NodeOption, route
from controlplane.serverless.settings import ServerlessSettings
from controlplane.serverless.spec import FunctionSpec

__all__ = ["Spawn", "Warmth"]

log = logging.getLogger("edgeplane.hub.functions")

# A spare asked for counts as a free instance this long, until heartbeats show it (or not).
SPARE_PENDING_S = 2.0

# Runs a coroutine as a task the function service stops with itself.
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class Warmth:
    """Instance tracking, keep-alive and pre-warm for the function service."""

    def __init__(
        self,
        hub: FunctionHost,
        settings: ServerlessSettings,
        *,
        estimates: Estimates,
        counters: Counter[str],
        resolve: Callable[[str], FunctionSpec],
        spawn: Spawn,
    ) -> None:
        self.hub = hub
        self.settings = settings
        self.policy: Policy = settings.policy
        self.estimates = estimates
        self.counters = counters
        self._resolve = resolve
        self._spawn = spawn
        self.instances: dict[str, dict[str, FunctionInstance]] = {}  # node -> instance id -> instance
        self.in_flight: Counter[tuple[str, str, int]] = Counter()  # (node, function, version)
        # Per node, done when it is declared lost: one future shared by every invocation waiting
        # on the node (a task per invocation to wait on an Event cost more than the wait).
        self._node_lost: dict[str, asyncio.Future[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._spare_asked: dict[str, float] = {}  # function -> when a spare was last asked for
        # While the stored arrivals are replayed into a copy of the policy: the live arrivals, to
        # feed that copy before it takes the policy's place (``FunctionService``).
        self._held: list[tuple[str, float, float, int]] | None = None

    def stop(self) -> None:
        """Cancel the pending pre-warm timers."""
        for timer in self._timers.values():
            timer.cancel()

    # --- what agents tell us --------------------------------------------------------------

    def update_instances(self, node: str, instances: list[FunctionInstance]) -> None:
        self.instances[node] = {i.instance_id: i for i in instances}

    def node_lost(self, node: str) -> None:
        self.instances.pop(node, None)
        lost = self._node_lost.pop(node, None)
        if lost is not None and not lost.done():
            lost.set_result(None)

    def lost_future(self, node: str) -> asyncio.Future[None]:
        """Done when ``node`` is declared lost (an invocation on it stops waiting for its answer).
        Shared: wait on it (``asyncio.wait``), never cancel it."""
        lost = self._node_lost.get(node)
        if lost is None:
            lost = self._node_lost[node] = asyncio.get_running_loop().create_future()
        return lost

    def served(self, node: str, spec: FunctionSpec, result: InvokeResultV1) -> None:
        """An instance on ``node`` answered an invocation successfully: know it as idle."""
        assert spec.version is not None
        known = self.instances.setdefault(node, {})
        instance = known.get(result.instance_id)
        if instance is None:
            known[result.instance_id] = FunctionInstance(
                instance_id=result.instance_id,
                function=spec.name,
                version=spec.version,
                state="idle",
                max_concurrency=spec.max_concurrency,
                memory=spec.memory,
                started_at=time.time(),
                last_used_at=time.time(),
                cold_start_ms=result.cold_start_ms,
            )
        else:
            # It just served this invocation, so it is past starting whatever the last heartbeat said.
            instance.last_used_at = time.time()
            if instance.state == "starting":
                instance.state = "idle"

    # --- what the hub dispatched ----------------------------------------------------------

    def dispatched(self, key: tuple[str, str, int]) -> None:
        """An invocation of (node, function, version) was sent: it holds a slot until it returns."""
        self.in_flight[key] += 1

    def returned(self, key: tuple[str, str, int]) -> None:
        self.in_flight[key] -= 1
        if self.in_flight[key] <= 0:
            del self.in_flight[key]

    def options(self, spec: FunctionSpec, exclude: set[str], *, assume_fit: bool = False) -> list[NodeOption]:
        """The nodes that may run ``spec`` (outside ``exclude``), priced by how warm each is
        (``assume_fit``: as if a new instance fitted on every Ready node, see ``node_options``)."""
        return node_options(
            self.hub,
            spec,
            exclude,
            instances=self.instances,
            in_flight=self.in_flight,
            estimates=self.estimates,
            assume_fit=assume_fit,
        )

    def unplaceable(self, spec: FunctionSpec) -> str:
        """Why no node can start an instance of ``spec`` now ("" when one can)."""
        return unplaceable_reason(self.hub, spec)

    # --- keep-alive and pre-warm ----------------------------------------------------------

    def observe_arrival(self, name: str, now: float) -> tuple[str, ...]:
        """Tell the policy an invocation of ``name`` arrives; returns the functions to pre-warm."""
        concurrency = 1 + sum(n for (_, fn, _), n in self.in_flight.items() if fn == name)
        exec_s = self.estimates.exec_ms(name) / 1000
        if self._held is not None:
            self._held.append((name, now, exec_s, concurrency))
        return self.policy.observe_invocation(name, now, exec_s, concurrency=concurrency)

    def hold_arrivals(self) -> None:
        """From now on, keep each arrival as the policy is told it (for :meth:`release_arrivals`)."""
        self._held = []

    def release_arrivals(self) -> list[tuple[str, float, float, int]]:
        """The arrivals kept since :meth:`hold_arrivals` (name, time, run time, concurrency), in
        order; keeping stops."""
        held, self._held = self._held or [], None
        return held

    def spare_hold_s(self, spec: FunctionSpec, free_slots: int) -> float:
        """Right after an arrival of ``spec`` was observed and routed: how long to hold a spare
        instance started now (0: none), as the policy's headroom predictor says. ``free_slots``:
        the slots of its instances on Ready nodes, starting ones included, not taken by calls in
        flight (``NodeOption.free_slots`` summed); the arrival itself is about to take one. A spare
        asked for in the last ``SPARE_PENDING_S`` counts as free (not in a heartbeat yet)."""
        headroom = self.policy.headroom
        if headroom is None or headroom.overlap_probability(spec.name) < headroom.config.threshold:
            return 0.0
        asked = self._spare_asked.get(spec.name)
        pending = int(asked is not None and time.monotonic() - asked < SPARE_PENDING_S)
        hold = self.policy.spare_hold_s(spec.name, free_instances=max(0, free_slots + pending - 1))
        if hold > 0:
            self._spare_asked[spec.name] = time.monotonic()
        return hold

    def keep_alive(self, spec: FunctionSpec, node: str, now: float) -> tuple[float, float]:
        """(keep-alive to send with this invocation, pre-warm delay after it ends or 0)."""
        window = self.policy.keepalive.release_window(
            spec.name, now + self.estimates.exec_ms(spec.name) / 1000
        )
        keep = min(window.keep_alive_s, self.settings.max_keep_alive_s)
        live = self.hub.nodes.get(node)
        if live is not None and live.power_source == "battery":
            keep *= self.settings.battery_keep_alive_factor
        if window.prewarm_s > 0:
            return 0.0, window.prewarm_s
        return keep, 0.0

    def schedule_prewarm(self, name: str, delay_s: float) -> None:
        """Pre-warm ``name`` in ``delay_s`` (replacing the one pending for it)."""
        previous = self._timers.pop(name, None)
        if previous is not None:
            previous.cancel()
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(
            delay_s, lambda: self._spawn(self.prewarm(name, reason="predicted arrival"))
        )

    def cancel_prewarm(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    async def prewarm(
        self,
        name: str,
        *,
        count: int = 1,
        reason: str = "",
        spare_hold_s: float | None = None,
        hold_s: float | None = None,
    ) -> PrewarmAckV1 | None:
        """Have ``count`` instances of the latest version warm on the best node for a cold start.

        ``spare_hold_s``: start one more instance there unless one is idle with room (a spare for
        a predicted overlap) and keep it that long unless it is used. ``hold_s``: keep the
        ``count`` instances free that long from now (a forecast's bin), not the policy's window."""
        if spare_hold_s is None and hold_s is None:
            self._timers.pop(name, None)
        try:
            spec = self._resolve(name)
        except NotFoundError:
            return None
        options = self.options(spec, set())
        decision = route(options, exec_ms=self.estimates.exec_ms(name), weights=self.settings.energy)
        if decision is None:
            return None
        node = decision.node
        live = self.hub.nodes[node]
        held = spare_hold_s if spare_hold_s is not None else hold_s
        if held is not None:
            keep = min(held, self.settings.max_keep_alive_s)
        else:
            window = self.policy.keepalive.release_window(name, asyncio.get_running_loop().time())
            keep = min(window.keep_alive_s or self.settings.max_keep_alive_s, self.settings.max_keep_alive_s)
        if live.power_source == "battery":
            keep *= self.settings.battery_keep_alive_factor
        request = PrewarmV1(
            request_id=uuid.uuid4().hex,
            code=spec.code(),
            count=count,
            keep_alive_s=keep,
            spare=spare_hold_s is not None,
        )
        try:
            data = await self.hub.bus.request(
                live.cluster,
                self.hub.bus.subjects(live.cluster).prewarm(node),
                encode(request),
                deadline_s=5.0,
            )
            ack = decode(data, PrewarmAckV1)
        except Exception as exc:
            log.info("pre-warm of %s on %s failed: %s", name, node, exc)
            return None
        kind = "prewarms" if held is None else "spares" if spare_hold_s is not None else "forecast_prewarms"
        self.counters[kind] += ack.started
        log.debug("pre-warmed %s on %s (%s): %d started", name, node, reason, ack.started)
        return ack
