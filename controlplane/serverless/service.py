"""The hub's serverless side: function registry, cold-start-aware invocation, keep-alive and pre-warm.

* Registry: versions are immutable; registering the same content again is a no-op, new content
  without a version gets the next number and becomes the one invocations use (a roll-out: agents
  drain the older version's instances).
* Invocation: the router (:mod:`controlplane.serverless.router`) picks a node and whether to use a
  warm instance, wait for a busy one or cold-start, from the instances agents report in their
  heartbeats plus what the hub dispatched since. An agent that has no subscriber (it is gone) is
  skipped and the invocation tried once elsewhere; an agent that dies mid-invocation ends it with
  ``agent_lost`` (not retried: it may have had effects). Every request has a deadline.
* Keep-alive and pre-warm: a :class:`~controlplane.serverless.keepalive.Policy` (``edgeplane`` by
  default: hybrid histogram + call-graph pre-warm + burst pool) sets each instance's keep-alive
  (shorter on battery-powered nodes) and, when it predicts the next arrival is far, lets the
  instance go and pre-warms one shortly before that arrival.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from edgeplane_contract.aio import stop_task
from edgeplane_contract.messages import (
    FunctionCode,
    FunctionInstance,
    InvocationQueryV1,
    InvocationStatusV1,
    InvokeResultV1,
    InvokeV1,
    MessageError,
    PrewarmAckV1,
    PrewarmV1,
    decode,
    encode,
)
from edgeplane_contract.transport import PAYLOAD_MARGIN

from controlplane.bus.hub_bus import MessageTooLargeError
from controlplane.errors import ConflictError, EdgeplaneError, NotFoundError, PayloadTooLargeError
from controlplane.hub.nodes import FunctionHost
from controlplane.serverless.estimates import Estimates, FunctionStats
from controlplane.serverless.keepalive import Policy, make_policy
from controlplane.serverless.recovery import InFlight, recover_invocations
from controlplane.serverless.router import EnergyWeights, NodeOption, Route, route
from controlplane.serverless.spec import FunctionSpec
from controlplane.store.models import FunctionRow, InvocationRow
from controlplane.store.store import Store

__all__ = ["FunctionService", "InvocationOutcome", "ServerlessSettings"]

# Error codes of invocations whose handler ran to its end: their timings are the function's own.
_RAN_TO_THE_END = ("function_error", "bad_result", "result_too_large")
_NOT_STRICT_JSON = {
    "code": "bad_result",
    "type": "ResultNotJSON",
    "message": "the handler's result is not strict JSON (NaN or Infinity)",
}

log = logging.getLogger("edgeplane.hub.functions")

# Time allowed on top of a function's timeout for a cold start and the network.
COLD_START_BUDGET_S = 30.0
# Failures of an invocation that did not start anywhere: a retry under its Idempotency-Key runs it.
NEVER_STARTED = frozenset({"no_capacity", "unavailable"})
# How long an invocation waits for the hub's NATS connection to come back before it is sent.
RECONNECT_WAIT_S = 15.0


@dataclass(slots=True)
class ServerlessSettings:
    policy: Policy = field(default_factory=lambda: make_policy("edgeplane"))  # parsed at the entry
    energy: EnergyWeights = field(default_factory=EnergyWeights)
    battery_keep_alive_factor: float = 0.5  # battery nodes keep idle instances this fraction as long
    max_keep_alive_s: float = 4 * 3600.0


@dataclass(slots=True)
class InvocationOutcome:
    invocation_id: str
    function: str
    version: int
    node: str | None
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    cold_start: bool = False
    cold_start_ms: float = 0.0
    queue_ms: float = 0.0
    exec_ms: float = 0.0
    total_ms: float = 0.0
    mode: str = ""

    def timings(self) -> dict[str, float]:
        return {
            "queue_ms": round(self.queue_ms, 3),
            "cold_start_ms": round(self.cold_start_ms, 3),
            "exec_ms": round(self.exec_ms, 3),
            "total_ms": round(self.total_ms, 3),
        }


class FunctionService:
    """Serverless functions for one hub; created and started by the hub."""

    def __init__(self, hub: FunctionHost, settings: ServerlessSettings | None = None) -> None:
        self.hub = hub
        self.settings = settings or ServerlessSettings()
        self.policy: Policy = self.settings.policy
        self.estimates = Estimates()
        self.specs: dict[str, dict[int, FunctionSpec]] = {}
        self.stats: dict[str, FunctionStats] = {}
        self.instances: dict[str, dict[str, FunctionInstance]] = {}  # node -> instance id -> instance
        self.in_flight: Counter[tuple[str, str, int]] = Counter()  # (node, function, version)
        self._node_lost: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.counters: Counter[str] = Counter()
        # Registrations and deletions of one hub in turn: a version number is read, then written.
        self._registry_lock = asyncio.Lock()

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        async with self.hub.store.session() as s:
            for row in await s.scalars(select(FunctionRow).where(FunctionRow.deleted.is_(False))):
                self.specs.setdefault(row.name, {})[row.version] = FunctionSpec.from_stored(row.spec)
            # Async invocations cut short by a hub restart: queued ones run now (no node had them);
            # for running ones the agents are asked first (serverless/recovery.py).
            in_flight: list[InFlight] = []
            functions: dict[str, tuple[str, int]] = {}
            for invocation in await s.scalars(
                select(InvocationRow).where(InvocationRow.status.in_(("Queued", "Running")))
            ):
                if invocation.status == "Running":
                    spec = self.specs.get(invocation.function, {}).get(invocation.version)
                    in_flight.append(InFlight(invocation.id, spec.timeout_s if spec is not None else 60.0))
                    functions[invocation.id] = (invocation.function, invocation.version)
                else:
                    event = invocation.event.get("value")
                    self._spawn(
                        self._run_async(invocation.id, invocation.function, invocation.version, event)
                    )

        if in_flight:
            log.info(
                "%d invocation(s) were running when the previous hub ended: asking the agents", len(in_flight)
            )
            self._spawn(self._recover(in_flight, functions))

    async def _recover(self, in_flight: list[InFlight], functions: dict[str, tuple[str, int]]) -> None:
        hub = self.hub

        def ready_nodes() -> list[tuple[str, str]]:
            return [(n.cluster, n.name) for n in hub.nodes.values() if n.status == "Ready"]

        async def ask(cluster: str, subject: str, payload: bytes) -> bytes:
            return await hub.bus.request(cluster, subject, payload, deadline_s=1.0)

        async def finish(invocation_id: str, node: str, result: InvokeResultV1) -> None:
            function, version = functions[invocation_id]
            outcome = InvocationOutcome(invocation_id, function, version, node, ok=False)
            _accept(outcome, result)
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

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        for task in list(self._tasks):
            await stop_task(task)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- what agents tell us --------------------------------------------------------------

    def update_instances(self, node: str, instances: list[FunctionInstance]) -> None:
        self.instances[node] = {i.instance_id: i for i in instances}

    def node_lost(self, node: str) -> None:
        self.instances.pop(node, None)
        event = self._node_lost.pop(node, None)
        if event is not None:
            event.set()

    # --- registry -------------------------------------------------------------------------

    async def register(self, spec: FunctionSpec) -> tuple[FunctionSpec, bool]:
        """Store a version; returns (the stored spec, created). Same content again is not a new version.

        Version numbers are never reused: after a DELETE, numbering continues after the highest
        version ever stored, and a deleted version registered again with the same content returns.
        """
        spec.check_fits(self.hub.bus.max_payload - PAYLOAD_MARGIN)
        async with self._registry_lock:
            versions = self.specs.get(spec.name, {})
            if spec.version is not None and spec.version in versions:
                existing = versions[spec.version]
                if existing.content() != spec.content():
                    raise ConflictError(
                        f"version {spec.version} of {spec.name!r} exists with other content", field="version"
                    )
                return existing, False
            if spec.version is None and versions:
                latest = versions[max(versions)]
                if latest.content() == spec.content():
                    return latest, False
            async with self.hub.store.session() as s:
                rows = {
                    row.version: row
                    for row in await s.scalars(select(FunctionRow).where(FunctionRow.name == spec.name))
                }
                if spec.version is None:
                    spec.version = max(rows, default=0) + 1
                deleted = rows.get(spec.version)
                if deleted is None:
                    s.add(
                        FunctionRow(
                            name=spec.name, version=spec.version, spec=spec.to_dict(), created_at=time.time()
                        )
                    )
                elif FunctionSpec.from_stored(deleted.spec).content() == spec.content():
                    deleted.deleted = False
                else:
                    raise ConflictError(
                        f"version {spec.version} of {spec.name!r} was deleted; its number is not reused "
                        "for other content (omit version to get the next one)",
                        field="version",
                    )
                Store.add_event(s, "FunctionVersionCreated", "function", spec.name, f"version {spec.version}")
            self.specs.setdefault(spec.name, {})[spec.version] = spec
        return spec, True

    def resolve(self, name: str, version: int | None = None) -> FunctionSpec:
        versions = self.specs.get(name)
        if not versions:
            raise NotFoundError(f"function {name!r} not found", field="name")
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            raise NotFoundError(f"function {name!r} has no version {version}", field="version")
        return versions[version]

    async def delete(self, name: str) -> None:
        async with self._registry_lock:
            self.resolve(name)
            async with self.hub.store.session() as s:
                for row in await s.scalars(select(FunctionRow).where(FunctionRow.name == name)):
                    row.deleted = True
                Store.add_event(s, "FunctionDeleted", "function", name)
            self.specs.pop(name, None)
            self.stats.pop(name, None)
            timer = self._timers.pop(name, None)
            if timer is not None:
                timer.cancel()

    @staticmethod
    def code_of(spec: FunctionSpec) -> FunctionCode:
        return spec.code()

    def check_event(self, spec: FunctionSpec, event: Any) -> None:
        """Refuse (413, naming the body) an event that, with the function's code, cannot fit in one
        NATS message: the agent could never receive the invocation."""
        room = self.hub.bus.max_payload - PAYLOAD_MARGIN
        size = len(encode(InvokeV1(invocation_id="0" * 32, code=spec.code(), event=event)))
        if size > room:
            raise PayloadTooLargeError(
                f"the invocation would be {size} bytes with this event, over the {room} one NATS message "
                "can carry here (strings count JSON-escaped)",
                field="<body>",
            )

    # --- routing --------------------------------------------------------------------------

    def _options(self, spec: FunctionSpec, exclude: set[str]) -> list[NodeOption]:
        options = []
        for name, live in self.hub.nodes.items():
            if live.status != "Ready" or name in exclude:
                continue
            if not self._allowed(spec, name, live.cluster):
                continue
            capacity = self.hub.node_capacity(name)
            if capacity.get("memory", 0) < spec.memory:
                continue
            if spec.gpu and capacity.get("gpus", 0) < spec.gpu:
                continue
            mine = [
                i
                for i in self.instances.get(name, {}).values()
                if (i.function, i.version) == (spec.name, spec.version)
            ]
            assert spec.version is not None
            dispatched = self.in_flight[(name, spec.name, spec.version)]
            slots = sum(i.max_concurrency for i in mine if i.state != "starting")
            reported_busy = sum(i.in_flight for i in mine)
            free = max(0, slots - max(reported_busy, dispatched))
            options.append(
                NodeOption(
                    node=name,
                    warm_free=free,
                    busy_instances=len(mine) if free == 0 else 0,
                    can_start=True,
                    net_ms=self.estimates.net_ms(name),
                    cold_ms=self.estimates.cold_ms(spec.name, name),
                    in_flight=sum(n for (node, _, _), n in self.in_flight.items() if node == name),
                    power_source=live.power_source,
                    battery_percent=live.battery_percent,
                )
            )
        return options

    def _allowed(self, spec: FunctionSpec, node: str, cluster: str) -> bool:
        affinity = spec.affinity
        if affinity.nodes and node not in affinity.nodes:
            return False
        if affinity.clusters and cluster not in affinity.clusters:
            return False
        if affinity.regions:
            config = self.hub.federation.cluster(cluster)
            if config is None or config.region not in affinity.regions:
                return False
        return True

    def _keep_alive(self, spec: FunctionSpec, node: str, now: float) -> tuple[float, float]:
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

    # --- invocation -----------------------------------------------------------------------

    async def invoke(
        self, name: str, event: Any, *, version: int | None = None, invocation_id: str | None = None
    ) -> InvocationOutcome:
        spec = self.resolve(name, version)
        assert spec.version is not None
        self.check_event(spec, event)
        invocation_id = invocation_id or uuid.uuid4().hex
        begin = time.perf_counter()
        loop = asyncio.get_running_loop()
        now = loop.time()
        concurrency = 1 + sum(n for (_, fn, _), n in self.in_flight.items() if fn == name)
        successors = self.policy.observe_invocation(
            name, now, self.estimates.exec_ms(name) / 1000, concurrency=concurrency
        )
        for successor in successors:
            if successor in self.specs and successor != name:
                self._spawn(self.prewarm(successor, reason="call graph"))
        tried: set[str] = set()
        outcome: InvocationOutcome | None = None
        for _attempt in range(3):
            decision = route(
                self._options(spec, tried), exec_ms=self.estimates.exec_ms(name), weights=self.settings.energy
            )
            if decision is None:
                break
            tried.add(decision.node)
            outcome = await self._dispatch(spec, decision, event, invocation_id, begin, now)
            if outcome is not None:
                break
        if outcome is None:
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
                    + (f" (tried {sorted(tried)})" if tried else ""),
                },
                total_ms=(time.perf_counter() - begin) * 1000,
            )
        self._record(spec, outcome)
        return outcome

    async def _dispatch(
        self, spec: FunctionSpec, decision: Route, event: Any, invocation_id: str, begin: float, now: float
    ) -> InvocationOutcome | None:
        """Send to one node; None when that node had no agent listening (safe to try elsewhere)."""
        assert spec.version is not None
        node = decision.node
        live = self.hub.nodes[node]
        keep_alive, prewarm_after = self._keep_alive(spec, node, now)
        request = InvokeV1(
            invocation_id=invocation_id,
            code=self.code_of(spec),
            event=event,
            keep_alive_s=keep_alive,
            allow_cold=decision.allow_cold,
            sent_at=time.time(),
        )
        key = (node, spec.name, spec.version)
        self.in_flight[key] += 1
        lost = self._node_lost.setdefault(node, asyncio.Event())
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
                self.hub.bus.request(live.cluster, subject, encode(request), deadline_s=budget_s)
            )
            lost_task = asyncio.ensure_future(lost.wait())
            done, _ = await asyncio.wait({request_task, lost_task}, return_when=asyncio.FIRST_COMPLETED)
            lost_task.cancel()
            if request_task not in done:
                # The node went silent: dead, or only cut off and still running the function (its
                # answer then arrives when it is heard again). Wait for it as long as the cluster
                # holds a silent node's work (eviction grace) within the function's timeout, or
                # until the node is back as a new agent process (its worker died with the old
                # one); then ask it once for a finished result before giving up.
                cluster = self.hub.federation.cluster(live.cluster)
                grace_s = cluster.eviction_grace_s if cluster is not None else 0.0
                await self._outlast_silence(request_task, node, boot_id, min(spec.timeout_s, grace_s))
            if not request_task.done():
                request_task.cancel()
                lost_error = {
                    "code": "agent_lost",
                    "type": "AgentLost",
                    "message": f"node {node} stopped answering during the invocation",
                }
                await self._answer_from_node(outcome, live.cluster, sent, spec, lost_error)
            else:
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
                    self._apply_result(outcome, data, sent, spec, node)
        finally:
            self.in_flight[key] -= 1
            if self.in_flight[key] <= 0:
                del self.in_flight[key]
        outcome.total_ms = (time.perf_counter() - begin) * 1000
        routing_ms = (sent - begin) * 1000
        outcome.queue_ms += routing_ms
        if outcome.ok and prewarm_after > 0:
            self._schedule_prewarm(spec.name, prewarm_after)
        return outcome

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
        self._apply_result(outcome, finished, sent, spec, outcome.node)

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

    def _apply_result(
        self, outcome: InvocationOutcome, data: bytes, sent: float, spec: FunctionSpec, node: str
    ) -> None:
        try:
            result = decode(data, InvokeResultV1)
        except MessageError as exc:
            self.hub.bus.malformed["invoke_result"] += 1
            outcome.error = {"code": "bad_reply", "type": "BadReply", "message": str(exc)}
            return
        _accept(outcome, result)
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

    # --- pre-warm -------------------------------------------------------------------------

    def _schedule_prewarm(self, name: str, delay_s: float) -> None:
        previous = self._timers.pop(name, None)
        if previous is not None:
            previous.cancel()
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(
            delay_s, lambda: self._spawn(self.prewarm(name, reason="predicted arrival"))
        )

    async def prewarm(self, name: str, *, count: int = 1, reason: str = "") -> PrewarmAckV1 | None:
        """Have ``count`` instances of the latest version warm on the best node for a cold start."""
        self._timers.pop(name, None)
        try:
            spec = self.resolve(name)
        except NotFoundError:
            return None
        options = self._options(spec, set())
        decision = route(options, exec_ms=self.estimates.exec_ms(name), weights=self.settings.energy)
        if decision is None:
            return None
        node = decision.node
        live = self.hub.nodes[node]
        window = self.policy.keepalive.release_window(name, asyncio.get_running_loop().time())
        keep = min(window.keep_alive_s or self.settings.max_keep_alive_s, self.settings.max_keep_alive_s)
        if live.power_source == "battery":
            keep *= self.settings.battery_keep_alive_factor
        request = PrewarmV1(
            request_id=uuid.uuid4().hex, code=self.code_of(spec), count=count, keep_alive_s=keep
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
        self.counters["prewarms"] += ack.started
        log.debug("pre-warmed %s on %s (%s): %d started", name, node, reason, ack.started)
        return ack

    # --- asynchronous invocations ---------------------------------------------------------

    async def invoke_async(
        self, name: str, event: Any, *, version: int | None = None, idempotency_key: str | None = None
    ) -> tuple[str, bool]:
        """Queue an invocation; (its id, True) or, for a key seen before, (that one's id, False)."""
        spec = self.resolve(name, version)
        assert spec.version is not None
        self.check_event(spec, event)
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
        spec = self.resolve(name, version)
        assert spec.version is not None
        self.check_event(spec, event)
        invocation_id, created = await self._store_invocation(
            name, spec.version, event, "Running", idempotency_key
        )
        if created:
            outcome = await self.invoke(name, event, version=spec.version, invocation_id=invocation_id)
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
            outcome = await self.invoke(name, event, version=version, invocation_id=invocation_id)
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

    # --- views for the API ----------------------------------------------------------------

    def function_json(self, name: str) -> dict[str, Any]:
        spec = self.resolve(name)
        now = time.time()
        instances = [
            {
                "node": node,
                "instance_id": i.instance_id,
                "version": i.version,
                "state": i.state,
                "in_flight": i.in_flight,
                "age_s": round(now - i.started_at, 3) if i.started_at else None,
                "idle_s": round(now - i.last_used_at, 3) if i.state == "idle" and i.last_used_at else None,
                "keep_alive_s": i.keep_alive_s,
                "cold_start_ms": round(i.cold_start_ms, 3),
            }
            for node, known in sorted(self.instances.items())
            for i in known.values()
            if i.function == name
        ]
        window = self.policy.keepalive.release_window(name, asyncio.get_running_loop().time())
        return {
            "name": name,
            "version": spec.version,
            "versions": sorted(self.specs[name]),
            "spec": spec.to_dict(),
            "instances": instances,
            "stats": self.stats.get(name, FunctionStats()).to_dict(),
            "policy": {
                "name": self.policy.name,
                "keep_alive_s": window.keep_alive_s,
                "prewarm_after_s": window.prewarm_s,
            },
        }


def _accept(outcome: InvocationOutcome, result: InvokeResultV1) -> None:
    """Take an agent's result into ``outcome``: a result that is not strict JSON (NaN or Infinity
    from a worker or command runtime that allows them) becomes an error, never a relayed result:
    the API's answer would not be JSON."""
    ok = result.ok and _strict_json(result.result)
    outcome.ok = ok
    outcome.result = result.result if ok else None
    outcome.error = dict(_NOT_STRICT_JSON) if result.ok and not ok else result.error
    outcome.cold_start = result.cold_start
    outcome.cold_start_ms = result.cold_start_ms
    outcome.queue_ms = result.queue_ms
    outcome.exec_ms = result.exec_ms


def _strict_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True
