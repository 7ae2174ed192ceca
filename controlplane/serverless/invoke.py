"""The invocation path: pick a node, send the invocation, wait for its answer.

The router (:mod:`controlplane.serverless.router`) picks a node and whether to use a warm instance,
wait for a busy one or cold-start. An agent that has no subscriber (it is gone) is skipped and the
invocation tried once elsewhere; an agent that dies mid-invocation ends it with ``agent_lost`` (not
retried: it may have had effects). Every request has a deadline. An answer that does not come (lost
with a connection, or the node fell silent) is asked of the node before the invocation fails. One
that finds no node right after the hub's connection came back (or the hub started) waits for the
nodes not heard since (``REREGISTER_LEASES``); one a node handed to no worker (``not_started``)
is tried on the other nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from edgeplane_contract.messages import (
    InvocationQueryV1,
    InvocationStatusV1,
    InvokeResultV1,
    MessageError,
    decode,
    encode,
)
from edgeplane_contract.transport import PAYLOAD_MARGIN

from controlplane.bus.hub_bus import MessageTooLargeError
from controlplane.errors import PayloadTooLargeError
from controlplane.fleet.nodes import FunctionHost, NodeLive
from controlplane.serverless.estimates import Estimates, FunctionStats
from controlplane.serverless.invoke_wire import InvokeWire
from controlplane.serverless.outcome import InvocationOutcome, accept_result
from controlplane.serverless.registry import FunctionRegistry
from controlplane.serverless.router import NodeOption, Route, route
from controlplane.serverless.settings import ServerlessSettings
from controlplane.serverless.spec import FunctionSpec
from controlplane.serverless.warmth import Spawn, Warmth

__all__ = ["COLD_START_BUDGET_S", "RECONNECT_WAIT_S", "REREGISTER_LEASES", "REREGISTER_MIN_S", "Invoker"]

log = logging.getLogger("edgeplane.hub.functions")

# An agent's answer for an invocation it handed to no worker: it ran nowhere, so it may go elsewhere.
NOT_STARTED = "not_started"
# Error codes of invocations whose handler ran to its end: their timings are the function's own.
_RAN_TO_THE_END = ("function_error", "bad_result", "result_too_large")
# Time allowed on top of a function's timeout for a cold start and the network.
COLD_START_BUDGET_S = 30.0
# How long an invocation waits for the hub's NATS connection to come back before it is sent.
RECONNECT_WAIT_S = 15.0
# For this many of its leases after the hub's connection to a node's cluster came back (or the hub
# started), a node not heard since may still be on its way back: an invocation that finds no
# capacity waits for it (within RECONNECT_WAIT_S and its budget) instead of failing at once.
REREGISTER_LEASES = 3.0
# ... and at least this long, however short their leases (an agent's reconnect backoff and its
# registration take a few seconds).
REREGISTER_MIN_S = 5.0


class Invoker:
    """Runs synchronous invocations of one hub's functions on its nodes."""

    def __init__(
        self,
        hub: FunctionHost,
        settings: ServerlessSettings,
        *,
        registry: FunctionRegistry,
        warmth: Warmth,
        estimates: Estimates,
        stats: dict[str, FunctionStats],
        counters: Counter[str],
        spawn: Spawn,
        on_outcome: Callable[[InvocationOutcome], None] | None = None,
    ) -> None:
        self.hub = hub
        self.on_outcome = on_outcome  # told of every finished invocation (the hub's metrics)
        self.settings = settings
        self.registry = registry
        self.warmth = warmth
        self.estimates = estimates
        self.stats = stats
        self.counters = counters
        self._spawn = spawn
        self.wire = InvokeWire()  # each version's code serialised once, not per invocation

    def check_event(self, spec: FunctionSpec, event: Any) -> None:
        """Refuse (413, naming the body) an event that, with the function's code, cannot fit in one
        NATS message: the agent could never receive the invocation."""
        self._check_size(spec, self.wire.event_json(event))

    def _check_size(self, spec: FunctionSpec, event_json: bytes) -> None:
        """:meth:`check_event` for an event already serialised."""
        room = self.hub.bus.max_payload - PAYLOAD_MARGIN
        size = len(self.wire.encode(spec, invocation_id="0" * 32, event_json=event_json))
        if size > room:
            raise PayloadTooLargeError(
                f"the invocation would be {size} bytes with this event, over the {room} one NATS message "
                "can carry here (strings count as UTF-8 JSON)",
                field="<body>",
            )

    async def invoke(
        self, name: str, event: Any, *, version: int | None = None, invocation_id: str | None = None
    ) -> InvocationOutcome:
        spec = self.registry.resolve(name, version)
        assert spec.version is not None
        event_json = self.wire.event_json(event)  # once: the size check and every send share it
        self._check_size(spec, event_json)
        invocation_id = invocation_id or uuid.uuid4().hex
        begin = time.perf_counter()
        loop = asyncio.get_running_loop()
        now = loop.time()
        successors = self.warmth.observe_arrival(name, now)
        for successor in successors:
            if successor in self.registry.specs and successor != name:
                self._spawn(self.warmth.prewarm(successor, reason="call graph"))
        tried: set[str] = set()
        outcome: InvocationOutcome | None = None
        not_started: InvocationOutcome | None = None
        wait_until = now + min(spec.timeout_s + COLD_START_BUDGET_S, RECONNECT_WAIT_S)
        for _round in range(100):  # bounded: each further round follows a node heard again
            for _attempt in range(3):
                decision, options = self._route(spec, tried)
                if not tried and _round == 0:
                    # The routing's view of the function's instances says how many slots are
                    # free; a spare starts when this arrival takes the last one and the next is
                    # predicted to overlap it.
                    spare_hold_s = self.warmth.spare_hold_s(spec, sum(o.free_slots for o in options))
                    if spare_hold_s > 0:
                        self._spawn(
                            self.warmth.prewarm(name, reason="predicted overlap", spare_hold_s=spare_hold_s)
                        )
                if decision is None:
                    break
                tried.add(decision.node)
                outcome = await self._dispatch(spec, decision, event_json, invocation_id, begin, now)
                if outcome is not None and (outcome.error or {}).get("code") == NOT_STARTED:
                    # Its node handed it to no worker (it ran nowhere): another node may run it.
                    self.counters["not_started_retried"] += 1
                    not_started, outcome = outcome, None
                    continue
                if outcome is not None:
                    break
            if outcome is not None or not await self._wait_for_returning_nodes(wait_until):
                break
            # Nothing ran: a node skipped (no responder) did not get the invocation; ask it again.
            tried.clear()
        outcome = outcome or not_started
        if outcome is None:
            why = "" if tried else self.warmth.unplaceable(spec)
            outcome = InvocationOutcome(
                invocation_id=invocation_id,
                function=name,
                version=spec.version,
                node=None,
                ok=False,
                error={
                    "code": "no_capacity",
                    "type": "NoCapacity",
                    "message": "no Ready node can run this function"
                    + (f" (tried {sorted(tried)})" if tried else "")
                    + (f": {why}" if why else ""),
                },
                total_ms=(time.perf_counter() - begin) * 1000,
            )
        self._record(spec, outcome)
        return outcome

    def _route(self, spec: FunctionSpec, tried: set[str]) -> tuple[Route | None, list[NodeOption]]:
        """The router's decision for ``spec`` outside ``tried``. Routed first as if a new instance
        fitted on every Ready node, which skips the placement engine's filters (most of a warm
        invocation's routing time): when that picks a warm instance or a queue, the filters could
        only have taken cold-start options away, never the cheapest, so it stands (its listed
        alternatives keep only warm and queue options); a cold start is routed again with them.
        Also returns the first options (every Ready node outside ``tried``, with its instances)."""
        exec_ms = self.estimates.exec_ms(spec.name)
        weights = self.settings.energy
        options = self.warmth.options(spec, tried, assume_fit=True)
        decision = route(options, exec_ms=exec_ms, weights=weights)
        if decision is None or decision.mode == "cold":
            return route(self.warmth.options(spec, tried), exec_ms=exec_ms, weights=weights), options
        decision.alternatives = [a for a in decision.alternatives if a.mode != "cold"]
        return decision, options

    async def _dispatch(
        self,
        spec: FunctionSpec,
        decision: Route,
        event_json: bytes,
        invocation_id: str,
        begin: float,
        now: float,
    ) -> InvocationOutcome | None:
        """Send to one node (``event_json``: the event serialised); None when that node had no
        agent listening (safe to try elsewhere)."""
        assert spec.version is not None
        node = decision.node
        live = self.hub.nodes[node]
        keep_alive, prewarm_after = self.warmth.keep_alive(spec, node, now)
        request = self.wire.encode(
            spec,
            invocation_id=invocation_id,
            event_json=event_json,
            keep_alive_s=keep_alive,
            allow_cold=decision.allow_cold,
            sent_at=time.time(),
        )
        key = (node, spec.name, spec.version)
        self.warmth.dispatched(key)
        lost = self.warmth.lost_future(node)
        boot_id = live.boot_id
        sent = time.perf_counter()
        outcome = InvocationOutcome(
            invocation_id=invocation_id,
            function=spec.name,
            version=spec.version,
            node=node,
            ok=False,
            mode=decision.mode,
        )
        budget_s = spec.timeout_s + COLD_START_BUDGET_S
        try:
            subject = self.hub.bus.subjects(live.cluster).invoke(node)
            # Not connected at this moment (NATS restarting): nothing was sent, so waiting for the
            # connection within the invocation's budget and sending then runs it once, not never.
            await self._wait_connected(live.cluster, min(budget_s, RECONNECT_WAIT_S))
            request_task = asyncio.ensure_future(
                self.hub.bus.request(live.cluster, subject, request, deadline_s=budget_s)
            )
            finished = await self._await_answer(request_task, lost, live.cluster, node, invocation_id)
            if finished is not None:  # its answer was lost with a connection; the node kept it
                request_task.cancel()
                self.counters["answers_recovered"] += 1
                self.apply_result(outcome, finished, sent, spec, node)
            elif not request_task.done() and lost.done():
                # The node went silent: dead, or only cut off and still running the function (its
                # answer then arrives when it is heard again). Wait for it as long as the cluster
                # holds a silent node's work (eviction grace) within the function's timeout, or
                # until the node is back as a new agent process (its worker died with the old
                # one); then ask it once for a finished result before giving up.
                cluster = self.hub.federation.cluster(live.cluster)
                grace_s = cluster.eviction_grace_s if cluster is not None else 0.0
                await self._outlast_silence(request_task, node, boot_id, min(spec.timeout_s, grace_s))
            if finished is None and not request_task.done():
                request_task.cancel()
                lost_error = {
                    "code": "agent_lost",
                    "type": "AgentLost",
                    "message": f"node {node} stopped answering during the invocation",
                }
                await self._answer_from_node(outcome, live.cluster, sent, spec, lost_error)
            elif finished is None:
                try:
                    data = request_task.result()
                except NoRespondersError:
                    self.counters["no_responders"] += 1
                    return None
                except (TimeoutError, NatsTimeoutError):
                    # The answer may have been lost with a connection (NATS restarted while the
                    # function ran): the node keeps finished results; ask it before giving up.
                    timeout_error = {
                        "code": "timeout",
                        "type": "Timeout",
                        "message": f"no answer from {node} within {budget_s:g}s",
                    }
                    await self._answer_from_node(outcome, live.cluster, sent, spec, timeout_error)
                except ConnectionError as exc:
                    outcome.error = {"code": "unavailable", "type": "Unavailable", "message": str(exc)}
                except MessageTooLargeError as exc:
                    outcome.error = {"code": "too_large", "type": "TooLarge", "message": str(exc)}
                else:
                    self.apply_result(outcome, data, sent, spec, node)
        finally:
            self.warmth.returned(key)
        outcome.total_ms = (time.perf_counter() - begin) * 1000
        routing_ms = (sent - begin) * 1000
        outcome.queue_ms += routing_ms
        if outcome.ok and prewarm_after > 0:
            self.warmth.schedule_prewarm(spec.name, prewarm_after)
        return outcome

    async def _await_answer(
        self,
        request: asyncio.Future[bytes],
        lost: asyncio.Future[Any],
        cluster: str,
        node: str,
        invocation_id: str,
    ) -> bytes | None:
        """Wait for the answer or the node's silence. An answer the agent sent while the hub's
        connection was down is lost (NATS keeps nothing for an absent subscriber), so each time the
        connection comes back the node is asked once for a finished result: returned when it has
        one; still running, its answer comes on the new connection."""
        heard_since = self.hub.bus.hearing_since(cluster)
        while True:
            waiting: set[asyncio.Future[Any]] = {request, lost}
            done, _ = await asyncio.wait(waiting, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            if done:
                return None
            since = self.hub.bus.hearing_since(cluster)
            if since is None or since == heard_since:
                continue
            heard_since = since  # a new connection since the request was sent
            finished = await self._ask_node(cluster, node, invocation_id)
            if finished is not None:
                return finished

    async def _outlast_silence(
        self, request: asyncio.Future[bytes], node: str, boot_id: str, timeout_s: float
    ) -> None:
        """Wait for ``request``'s answer while its node is silent: at most ``timeout_s``, and no
        longer once the node is back as another agent process (a new boot id)."""
        for _ in range(int(timeout_s / 0.5)):
            done, _ = await asyncio.wait({request}, timeout=0.5)
            if done:
                return
            live = self.hub.nodes.get(node)
            if live is not None and live.boot_id != boot_id and live.status == "Ready":
                return

    def _reregister_grace_s(self, live: NodeLive) -> float:
        """How long after the hub hears its cluster again a node may take to be heard itself."""
        return max(REREGISTER_LEASES * live.lease_s, REREGISTER_MIN_S)

    def _returning_nodes(self, now: float) -> set[str]:
        """Nodes that may be on their way back: Ready (or held) but not heard since the hub's
        connection to their cluster came back or the hub started, within their grace since then
        (``_reregister_grace_s``); and those of a cluster the hub cannot hear now."""
        returning = set()
        for name, live in self.hub.nodes.items():
            if live.status != "Ready" and not live.held:
                continue
            since = self.hub.bus.hearing_since(live.cluster)
            if since is None or (live.last_seen < since and now - since < self._reregister_grace_s(live)):
                returning.add(name)
        return returning

    def _still_returning(self, name: str, now: float) -> bool | None:
        """For a node waited for: True while it may still come back, False once its grace ended,
        None when it was heard again (or is gone). Its status does not end the wait: a node not
        heard after the reconnect goes NotReady at its lease, and may still re-register within
        its grace."""
        live = self.hub.nodes.get(name)
        if live is None:
            return False
        since = self.hub.bus.hearing_since(live.cluster)
        if since is None:
            return True
        if live.last_seen >= since and live.status == "Ready":
            return None
        return now - since < self._reregister_grace_s(live)

    async def _wait_for_returning_nodes(self, until: float) -> bool:
        """With no capacity now: wait (until ``until``, loop time) while nodes may be on their way
        back after a reconnect or a hub start (``_returning_nodes``). True as soon as one is heard
        again or all their graces ended (route again); False when none is returning or time is up."""
        loop = asyncio.get_running_loop()
        waiting = self._returning_nodes(loop.time())
        if waiting:
            self.counters["waited_for_reregistration"] += 1
        while waiting and loop.time() < until:
            await asyncio.sleep(0.1)
            now = loop.time()
            states = [self._still_returning(name, now) for name in waiting]
            if None in states or not any(states):
                return True
        return False

    async def _wait_connected(self, cluster: str, within_s: float) -> None:
        """Until the hub's NATS connection for ``cluster`` is up, at most ``within_s`` seconds."""
        for _ in range(max(1, int(within_s / 0.1))):  # bounded: polled, the bus has no such event
            if self.hub.bus.hearing_since(cluster) is not None:
                return
            await asyncio.sleep(0.1)

    async def _answer_from_node(
        self, outcome: InvocationOutcome, cluster: str, sent: float, spec: FunctionSpec, error: dict[str, Any]
    ) -> None:
        """The answer did not come (lost with a connection, or the node fell silent): take the
        node's finished result if it has one, else fail ``outcome`` with ``error``."""
        assert outcome.node is not None
        finished = await self._ask_node(cluster, outcome.node, outcome.invocation_id)
        if finished is None:
            outcome.error = error
            return
        self.counters["answers_recovered"] += 1
        self.apply_result(outcome, finished, sent, spec, outcome.node)

    async def _ask_node(self, cluster: str, node: str, invocation_id: str) -> bytes | None:
        """The encoded result of ``invocation_id`` if ``node`` finished it (None: it did not, it
        does not know it, or it cannot be asked now)."""
        query = InvocationQueryV1(query_id=uuid.uuid4().hex, invocation_ids=[invocation_id])
        try:
            subject = self.hub.bus.subjects(cluster).invocation_query(node)
            data = await self.hub.bus.request(cluster, subject, encode(query), deadline_s=2.0)
        except Exception:  # not reachable, nobody listening, no answer in time: no result
            return None
        try:
            status = decode(data, InvocationStatusV1)
        except MessageError as exc:
            self.hub.bus.malformed["invocation_status"] += 1
            log.warning("node %s answered the invocation query with a malformed reply: %s", node, exc)
            return None
        for result in status.finished:
            if result.invocation_id == invocation_id:
                return encode(result)
        return None

    def apply_result(
        self, outcome: InvocationOutcome, data: bytes, sent: float, spec: FunctionSpec, node: str
    ) -> None:
        try:
            result = decode(data, InvokeResultV1)
        except MessageError as exc:
            self.hub.bus.malformed["invoke_result"] += 1
            outcome.error = {"code": "bad_reply", "type": "BadReply", "message": str(exc)}
            return
        accept_result(outcome, result)
        round_trip = (time.perf_counter() - sent) * 1000
        agent_ms = result.cold_start_ms + result.queue_ms + result.exec_ms
        if outcome.error is None or outcome.error.get("code") in _RAN_TO_THE_END:
            self.estimates.observe(
                spec.name,
                node,
                exec_ms=result.exec_ms,
                cold_ms=result.cold_start_ms if result.cold_start else None,
                overhead_ms=round_trip - agent_ms,
            )
        if result.instance_id and outcome.ok:
            self.warmth.served(node, spec, result)

    def _record(self, spec: FunctionSpec, outcome: InvocationOutcome) -> None:
        stats = self.stats.setdefault(spec.name, FunctionStats())
        code = (outcome.error or {}).get("code")
        stats.record(
            outcome.node or "-",
            cold=outcome.cold_start,
            latency_ms=outcome.total_ms,
            cold_ms=outcome.cold_start_ms,
            ok=outcome.ok,
            timeout=code == "timeout",
        )
        if self.on_outcome is not None:
            self.on_outcome(outcome)
