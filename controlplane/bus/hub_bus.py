"""The hub's side of NATS: connections per cluster, subscriptions, commands with acks.

Clusters whose federation entry names no ``nats_url`` share the hub's default connection.
A malformed message is counted (``malformed``), logged (at a bounded rate per node) and dropped;
the hub keeps running.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from edgeplane_contract.errors import EdgeplaneError
from edgeplane_contract.messages import (
    DEFAULT_PREFIX,
    CommandAckV1,
    CommandV1,
    HeartbeatV1,
    HubHelloV1,
    MessageError,
    RegisterAckV1,
    RegisterV1,
    ReportAckV1,
    StatusReportV1,
    Subjects,
    decode,
    encode,
)
from edgeplane_contract.transport import DEFAULT_MAX_PAYLOAD, connect_nats

from controlplane.bus.admission import AdmissionPace
from controlplane.bus.nats_auth import agent_inbox_prefix
from controlplane.federation.config import FederationConfig
from controlplane.ratelimited_log import RateLimitedLog

__all__ = ["HubBus", "MessageTooLargeError"]

log = logging.getLogger("edgeplane.hub.bus")

# Registrations handled at once (each waits for its batch's transaction in the hub); beyond this
# the hub answers with a turn to come back at (``RegisterAckV1.retry_after_s``). Few enough that
# each is answered well within an agent's request timeout (3 s) on a loaded hub: an agent that
# gave up meanwhile was admitted without knowing it, went silent, and its lease ran out.
REGISTER_IN_FLIGHT = 64
# Status reports applied in one transaction at most, and queued at most before the subscription
# stops taking more (then the server's pending queue holds them; agents resend what is not acked).
REPORT_BATCH = 256
REPORT_QUEUE_MAX = 4 * REPORT_BATCH
# How long close() lets the batch being applied finish before it cancels the drain.
REPORT_DRAIN_GRACE_S = 5.0


class MessageTooLargeError(EdgeplaneError):
    """A message larger than the connection's ``max_payload``: it can never be sent as it is."""

    code = "too_large"
    http_status = 413

    def __init__(self, subject: str, size: int, max_payload: int) -> None:
        super().__init__(f"message of {size} bytes on {subject} exceeds the NATS max payload ({max_payload})")
        self.subject = subject
        self.size = size
        self.max_payload = max_payload


class AgentHandlers(Protocol):
    """What the bus hands an agent's well-formed messages to (the hub)."""

    async def handle_register(self, node_name: str, msg: RegisterV1) -> RegisterAckV1: ...
    async def handle_heartbeat(self, node_name: str, msg: HeartbeatV1) -> None: ...
    async def handle_reports(self, reports: Sequence[tuple[str, StatusReportV1]]) -> Collection[str]:
        """Apply ``(node, report)`` pairs, in order; returns the ids of the reports settled (applied,
        or refused for good), which are acknowledged; the others are resent by their agents."""
        ...


class HubBus:
    """NATS connections and subscriptions of one hub."""

    def __init__(
        self,
        *,
        default_url: str,
        federation: FederationConfig,
        hub_id: str,
        command_timeout_s: float = 2.0,
        seed: str | None = None,
        tls: ssl.SSLContext | None = None,
        check_reply_inbox: bool = False,
    ) -> None:
        self.default_url = default_url
        self.federation = federation
        self.hub_id = hub_id
        self._handlers: AgentHandlers | None = None
        self.command_timeout_s = command_timeout_s
        self._conns: dict[str, NATS] = {}
        self._heartbeat_subs: list[Subscription] = []
        self._seed = seed
        self._tls = tls
        # Enrolled agents ask from their own inbox prefix only; a request whose reply subject is
        # elsewhere would make the hub answer into a subject the sender chose (another node's).
        self._check_reply_inbox = check_reply_inbox
        self.malformed: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()  # well-formed but refused (see reject())
        # Every refusal is counted; the log gets the first per (node, kind), then one summary
        # line per interval: one agent key sending garbage must not flood the hub's log.
        self.refusals_log = RateLimitedLog(log, interval_s=10.0)
        # Per connection: since when it has been up without a break (None: down now).
        self._up_since: dict[str, float | None] = {}
        self.started_at = 0.0
        self._register_slots: asyncio.Semaphore | None = None
        self._registering: set[asyncio.Task[None]] = set()
        # Registrations beyond REGISTER_IN_FLIGHT are told when to come back, in turns at a bounded
        # rate (``bus.admission.AdmissionPace``); counted here.
        self.admission_pace = AdmissionPace()
        self.register_deferred = 0
        # Reports taken off the subscription, waiting for the drain task's next batch.
        self._reports: deque[tuple[str, StatusReportV1, Msg]] = deque()
        self._reports_waiting = asyncio.Event()
        self._reports_room = asyncio.Event()
        self._report_task: asyncio.Task[None] | None = None
        self._closing = False

    def _agent_handlers(self) -> AgentHandlers:
        if self._handlers is None:  # subscriptions are only made in start(), which sets them
            raise RuntimeError("the hub bus delivers agent messages only after start()")
        return self._handlers

    def _url_for(self, cluster: str) -> str:
        cfg = self.federation.cluster(cluster)
        return (cfg.nats_url if cfg and cfg.nats_url else None) or self.default_url

    def subjects(self, cluster: str) -> Subjects:
        cfg = self.federation.cluster(cluster)
        return Subjects(cluster=cluster, prefix=cfg.subject_prefix if cfg else DEFAULT_PREFIX)

    @property
    def signing_seed(self) -> str | None:
        """The hub's nkey seed (None: it connects anonymously): it also signs policy versions."""
        return self._seed

    @property
    def connected(self) -> bool:
        return bool(self._conns) and all(nc.is_connected for nc in self._conns.values())

    @property
    def max_payload(self) -> int:
        """The largest message every connection can carry (servers announce it on connect)."""
        sizes = [nc.max_payload for nc in self._conns.values() if nc.max_payload > 0]
        return min(sizes, default=DEFAULT_MAX_PAYLOAD)

    async def start(self, handlers: AgentHandlers, *, connect_within_s: float = 30.0) -> None:
        """Connect to every cluster's server and hand agents' messages to ``handlers``."""
        self._handlers = handlers
        self._register_slots = asyncio.Semaphore(REGISTER_IN_FLIGHT)
        self._closing = False
        self._report_task = asyncio.create_task(self._drain_reports(), name="hub-reports")
        loop = asyncio.get_running_loop()
        self.started_at = loop.time()
        registered: set[tuple[str, str]] = set()
        for cluster in self.federation.clusters:
            url = self._url_for(cluster.name)
            if url not in self._conns:
                self._conns[url] = await connect_nats(
                    url,
                    name=f"edgeplane-hub-{self.hub_id}",
                    connect_within_s=connect_within_s,
                    on_reconnected=self._reconnected_hook(url),
                    on_disconnected=self._disconnected_hook(url),
                    seed=self._seed,
                    tls=self._tls,
                )
                self._up_since[url] = loop.time()
            nc = self._conns[url]
            subjects = self.subjects(cluster.name)
            # Registrations are taken for every cluster under the prefix, so that an agent of an
            # unknown cluster gets a refusal with a reason instead of silence.
            register_all = f"{subjects.prefix}.*.node.*.register"
            if (url, register_all) not in registered:
                registered.add((url, register_all))
                await nc.subscribe(register_all, cb=self._take_register)
            self._heartbeat_subs.append(
                await nc.subscribe(subjects.agent_wildcard("heartbeat"), cb=self._handle_heartbeat)
            )
            await nc.subscribe(subjects.agent_wildcard("report"), cb=self._handle_report)
        for nc in self._conns.values():
            await nc.flush(timeout=5)
        await self.say_hello()

    def _reconnected_hook(self, url: str) -> Callable[[], Awaitable[None]]:
        async def reconnected() -> None:
            self._up_since[url] = asyncio.get_running_loop().time()
            await self.say_hello()

        return reconnected

    def _disconnected_hook(self, url: str) -> Callable[[], Awaitable[None]]:
        async def disconnected() -> None:
            self._up_since[url] = None

        return disconnected

    def unread_heartbeats(self) -> int:
        """Heartbeats received but not yet handled (waiting in the subscriptions' queues): while
        there are some, a node's silence may be the hub's backlog, not the node's."""
        return sum(sub.pending_msgs for sub in self._heartbeat_subs)

    def hearing_since(self, cluster: str) -> float | None:
        """Since when (event-loop time) the hub has been able to hear the cluster's agents without a
        break; None while its connection is down. Lease expiry counts from here at the earliest."""
        url = self._url_for(cluster)
        nc = self._conns.get(url)
        if nc is None or not nc.is_connected:
            return None
        return self._up_since.get(url)

    def reconnects(self, cluster: str) -> int:
        """How many times the cluster's connection came back after a break (the client counts)."""
        nc = self._conns.get(self._url_for(cluster))
        return int(nc.stats.get("reconnects", 0)) if nc is not None else 0

    async def say_hello(self) -> None:
        """Ask every agent to re-register (after a hub restart or a reconnect)."""
        hello = encode(HubHelloV1(hub_id=self.hub_id, started_at=self.started_at))
        prefixes = {
            self.subjects(c.name).hub_hello(): self._url_for(c.name) for c in self.federation.clusters
        }
        for subject, url in prefixes.items():
            nc = self._conns.get(url)
            if nc is not None and nc.is_connected:
                await nc.publish(subject, hello)

    async def close(self) -> None:
        await self._stop_reports()
        for nc in self._conns.values():
            try:
                await asyncio.wait_for(nc.drain(), timeout=2)
            except Exception:  # closing anyway; drain fails on a dead connection
                await nc.close()
        self._conns.clear()
        for task in list(self._registering):  # their replies have nowhere to go now
            task.cancel()

    async def send_command(self, cluster: str, node: str, command: CommandV1) -> CommandAckV1 | None:
        """Deliver a command and wait for the agent's ack; None when nobody answered in time.

        Raises MessageTooLargeError when the command can never be sent (resending would not help).
        """
        nc = self._conns.get(self._url_for(cluster))
        if nc is None or not nc.is_connected:
            return None
        subject = self.subjects(cluster).command(node)
        payload = encode(command)
        try:
            self._check_size(nc, subject, payload)
            reply = await nc.request(subject, payload, timeout=self.command_timeout_s)
        except (MessageTooLargeError, MaxPayloadError) as exc:
            too_large = MessageTooLargeError(subject, len(payload), nc.max_payload)
            log.warning("command %s to %s not sent: %s", command.command_id, node, too_large)
            raise too_large from exc
        except (TimeoutError, NatsTimeoutError, NoRespondersError):
            return None
        except Exception as exc:  # connection closing or reconnecting: retried by the reconcile loop
            log.debug("command %s to %s failed: %s", command.command_id, node, exc)
            return None
        try:
            return decode(reply.data, CommandAckV1)
        except MessageError as exc:
            self._count_malformed("command_ack", node, exc)
            return None

    async def request(self, cluster: str, subject: str, payload: bytes, *, deadline_s: float) -> bytes:
        """A raw request on a cluster's connection.

        Raises NoRespondersError (nobody listens), TimeoutError, ConnectionError (no connection) or
        MessageTooLargeError (over the connection's max_payload).
        """
        nc = self._conns.get(self._url_for(cluster))
        if nc is None or not nc.is_connected:
            raise ConnectionError(f"no NATS connection for cluster {cluster!r}")
        self._check_size(nc, subject, payload)
        try:
            reply = await nc.request(subject, payload, timeout=deadline_s)
        except MaxPayloadError:  # the server lowered its limit since we looked
            raise MessageTooLargeError(subject, len(payload), nc.max_payload) from None
        return bytes(reply.data)

    @staticmethod
    def _check_size(nc: NATS, subject: str, payload: bytes) -> None:
        if nc.max_payload > 0 and len(payload) > nc.max_payload:
            raise MessageTooLargeError(subject, len(payload), nc.max_payload)

    def _count_malformed(self, kind: str, node: str, exc: Exception) -> None:
        self.malformed[kind] += 1
        self.refusals_log.log(
            ("malformed", kind, node),
            "dropped malformed %(kind)s from %(node)s: %(reason)s",
            "dropped %(count)d more malformed %(kind)s from %(node)s in the last %(interval)s s: %(reason)s",
            kind=kind,
            node=node or "?",
            reason=str(exc),
        )

    def reject(self, kind: str, node: str, reason: str) -> None:
        """Count and log a well-formed message the hub refuses (an unenrolled node, a value out
        of bounds); /healthz shows the counts as ``rejected_messages``. Logged at a bounded rate
        per (node, kind): the first, then one summary line per 10 s."""
        self.rejected[kind] += 1
        self.refusals_log.log(
            ("refused", kind, node),
            "refused %(kind)s from %(node)s: %(reason)s",
            "refused %(count)d more %(kind)s from %(node)s in the last %(interval)s s: %(reason)s",
            kind=kind,
            node=node or "?",
            reason=reason,
        )

    def _reply_outside_inbox(self, msg: Msg, kind: str, node: str) -> bool:
        """True (counted, logged) when a request's reply subject is not under its node's inbox."""
        if not self._check_reply_inbox or not msg.reply:
            return False
        parts = msg.subject.split(".")
        cluster = parts[-4] if len(parts) >= 4 else ""
        if msg.reply.startswith(agent_inbox_prefix(cluster, node) + "."):
            return False
        self.reject(kind, node, f"reply subject {msg.reply[:80]!r} is not under the node's inbox")
        return True

    async def _respond(self, msg: Msg, payload: Any) -> None:
        if msg.reply:
            try:
                await msg.respond(encode(payload))
            except Exception as exc:
                log.debug("could not reply on %s: %s", msg.subject, exc)

    async def _take_register(self, msg: Msg) -> None:
        """The subscription's callback: nats-py awaits it before the next message, so each
        registration runs in a task of its own, up to ``REGISTER_IN_FLIGHT`` at once (the hub
        writes those waiting together in one transaction)."""
        slots = self._register_slots
        if slots is None:
            raise RuntimeError("the hub bus delivers agent messages only after start()")
        loop = asyncio.get_running_loop()
        if slots.locked():  # a storm: this one gets a later turn instead of a place in a queue
            await self._defer_register(msg, loop.time())
            return
        await slots.acquire()
        task = asyncio.create_task(self._handle_register(msg))
        self._registering.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._registering.discard(finished)
            slots.release()

        task.add_done_callback(done)

    async def _defer_register(self, msg: Msg, now: float) -> None:
        """Answer "not yet, come back in N s" (``retry_after_s``) without reading the message: the
        hub admits registrations at the pace it can write them, and an agent left waiting in a
        queue past its request's timeout would only ask again, to be admitted twice."""
        node = Subjects.node_from_subject(msg.subject)
        if self._reply_outside_inbox(msg, "register", node):
            return
        self.register_deferred += 1
        delay = round(self.admission_pace.turn(now, len(self._registering)), 2)
        reason = f"the hub is admitting other registrations: register again in {delay:.1f}s"
        await self._respond(
            msg, RegisterAckV1(accepted=False, reason=reason, hub_id=self.hub_id, retry_after_s=delay)
        )

    async def _handle_register(self, msg: Msg) -> None:
        node = Subjects.node_from_subject(msg.subject)
        if self._reply_outside_inbox(msg, "register", node):
            return
        try:
            register = decode(msg.data, RegisterV1)
        except MessageError as exc:
            self._count_malformed("register", node, exc)
            await self._respond(msg, RegisterAckV1(accepted=False, reason=str(exc), hub_id=self.hub_id))
            return
        expected = self.subjects(register.cluster).register(node)
        if self.federation.cluster(register.cluster) is not None and msg.subject != expected:
            reason = f"cluster {register.cluster!r} registers on {expected!r}, not {msg.subject!r}"
            await self._respond(msg, RegisterAckV1(accepted=False, reason=reason, hub_id=self.hub_id))
            return
        try:
            ack = await self._agent_handlers().handle_register(node, register)
        except Exception as exc:
            log.exception("register of %s failed", node)
            ack = RegisterAckV1(accepted=False, reason=f"hub error: {exc}", hub_id=self.hub_id)
        await self._respond(msg, ack)

    async def _handle_heartbeat(self, msg: Msg) -> None:
        node = Subjects.node_from_subject(msg.subject)
        try:
            heartbeat = decode(msg.data, HeartbeatV1)
        except MessageError as exc:
            self._count_malformed("heartbeat", node, exc)
            return
        try:
            await self._agent_handlers().handle_heartbeat(node, heartbeat)
        except Exception:
            log.exception("heartbeat of %s failed", node)

    async def _handle_report(self, msg: Msg) -> None:
        """The subscription's callback: a well-formed report is queued for the drain task, which
        applies what is waiting in one transaction (one commit per batch, not per report)."""
        node = Subjects.node_from_subject(msg.subject)
        if self._reply_outside_inbox(msg, "report", node):
            return
        try:
            report = decode(msg.data, StatusReportV1)
        except MessageError as exc:
            self._count_malformed("report", node, exc)
            return
        while len(self._reports) >= REPORT_QUEUE_MAX and not self._closing:
            # nats-py awaits this callback before the next message: the server holds the rest.
            self._reports_room.clear()
            await self._reports_room.wait()
        self._reports.append((node, report, msg))
        self._reports_waiting.set()

    async def _drain_reports(self) -> None:
        """Apply queued reports in batches of up to ``REPORT_BATCH``, each acked only once its
        batch has committed; reports the hub could not apply are not acked (their agents resend).
        Reports arriving while a batch is applied form the next one: the batch grows with the load."""
        while not self._closing:
            await self._reports_waiting.wait()
            self._reports_waiting.clear()
            while self._reports and not self._closing:
                batch = [self._reports.popleft() for _ in range(min(REPORT_BATCH, len(self._reports)))]
                self._reports_room.set()
                await self._apply_reports(batch)

    async def _apply_reports(self, batch: list[tuple[str, StatusReportV1, Msg]]) -> None:
        try:
            settled = await self._agent_handlers().handle_reports([(node, r) for node, r, _ in batch])
        except Exception as exc:
            # No ack: the agents keep the reports in their outboxes and send them again.
            log.warning("%d report(s) not applied, left to their agents' resends: %s", len(batch), exc)
            return
        for _, report, msg in batch:
            if report.report_id in settled:
                await self._respond(msg, ReportAckV1(report_id=report.report_id))

    async def _stop_reports(self) -> None:
        """End the drain between batches (one cut short inside its transaction could leave SQLite's
        write lock behind); cancelled only when a batch outlasts the grace. What is still queued is
        not acked: its agents resend it to the next hub."""
        self._closing = True
        self._reports_waiting.set()
        self._reports_room.set()
        task, self._report_task = self._report_task, None
        if task is None:
            return
        _, running = await asyncio.wait({task}, timeout=REPORT_DRAIN_GRACE_S)
        if running:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not task.cancelled() and task.exception() is not None:
            log.error("the report drain had failed: %s", task.exception())
        self._reports.clear()
