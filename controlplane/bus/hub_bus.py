"""The hub's side of NATS: connections per cluster, subscriptions, commands with acks.

Clusters whose federation entry names no ``nats_url`` share the hub's default connection.
A malformed message is counted (``malformed``), logged and dropped; the hub keeps running.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from controlplane.bus.messages import (
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
from controlplane.federation.config import FederationConfig

__all__ = ["HubBus", "connect_nats"]

log = logging.getLogger("edgeplane.hub.bus")

RegisterHandler = Callable[[str, RegisterV1], Awaitable[RegisterAckV1]]
HeartbeatHandler = Callable[[str, HeartbeatV1], Awaitable[None]]
ReportHandler = Callable[[str, StatusReportV1], Awaitable[None]]


async def connect_nats(
    url: str,
    *,
    name: str,
    connect_within_s: float = 30.0,
    on_reconnected: Callable[[], Awaitable[None]] | None = None,
    on_disconnected: Callable[[], Awaitable[None]] | None = None,
) -> NATS:
    """Connect with exponential backoff for the first connection, then let nats-py reconnect forever."""

    async def _error(exc: Exception) -> None:
        log.debug("nats %s: %s", url, exc)

    async def _reconnected() -> None:
        log.info("nats %s: reconnected", url)
        if on_reconnected is not None:
            await on_reconnected()

    async def _disconnected() -> None:
        log.warning("nats %s: disconnected", url)
        if on_disconnected is not None:
            await on_disconnected()

    async for attempt in AsyncRetrying(
        stop=stop_after_delay(connect_within_s),
        wait=wait_exponential(multiplier=0.1, max=2.0),
        retry=retry_if_exception_type(Exception),
        reraise=True,
    ):
        with attempt:
            return await nats.connect(
                servers=[url],
                name=name,
                connect_timeout=2,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                ping_interval=5,
                max_outstanding_pings=2,
                error_cb=_error,
                reconnected_cb=_reconnected,
                disconnected_cb=_disconnected,
            )
    raise AssertionError("unreachable")  # pragma: no cover


class HubBus:
    """NATS connections and subscriptions of one hub."""

    def __init__(
        self,
        *,
        default_url: str,
        federation: FederationConfig,
        hub_id: str,
        on_register: RegisterHandler,
        on_heartbeat: HeartbeatHandler,
        on_report: ReportHandler,
        command_timeout_s: float = 2.0,
    ) -> None:
        self.default_url = default_url
        self.federation = federation
        self.hub_id = hub_id
        self._on_register = on_register
        self._on_heartbeat = on_heartbeat
        self._on_report = on_report
        self.command_timeout_s = command_timeout_s
        self._conns: dict[str, NATS] = {}
        self.malformed: Counter[str] = Counter()
        self.started_at = 0.0

    def _url_for(self, cluster: str) -> str:
        cfg = self.federation.cluster(cluster)
        return (cfg.nats_url if cfg and cfg.nats_url else None) or self.default_url

    def subjects(self, cluster: str) -> Subjects:
        cfg = self.federation.cluster(cluster)
        return Subjects(cluster=cluster, prefix=cfg.subject_prefix if cfg else "edgeplane.v1")

    @property
    def connected(self) -> bool:
        return bool(self._conns) and all(nc.is_connected for nc in self._conns.values())

    async def start(self, *, connect_within_s: float = 30.0) -> None:
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
                    on_reconnected=self.say_hello,
                )
            nc = self._conns[url]
            subjects = self.subjects(cluster.name)
            # Registrations are taken for every cluster under the prefix, so that an agent of an
            # unknown cluster gets a refusal with a reason instead of silence.
            register_all = f"{subjects.prefix}.*.node.*.register"
            if (url, register_all) not in registered:
                registered.add((url, register_all))
                await nc.subscribe(register_all, cb=self._handle_register)
            await nc.subscribe(subjects.agent_wildcard("heartbeat"), cb=self._handle_heartbeat)
            await nc.subscribe(subjects.agent_wildcard("report"), cb=self._handle_report)
        for nc in self._conns.values():
            await nc.flush(timeout=5)
        await self.say_hello()

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
        for nc in self._conns.values():
            try:
                await asyncio.wait_for(nc.drain(), timeout=2)
            except Exception:  # closing anyway; drain fails on a dead connection
                await nc.close()
        self._conns.clear()

    async def send_command(self, cluster: str, node: str, command: CommandV1) -> CommandAckV1 | None:
        """Deliver a command and wait for the agent's ack; None when nobody answered in time."""
        nc = self._conns.get(self._url_for(cluster))
        if nc is None or not nc.is_connected:
            return None
        try:
            reply = await nc.request(
                self.subjects(cluster).command(node), encode(command), timeout=self.command_timeout_s
            )
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

        Raises NoRespondersError (nobody listens), TimeoutError, or ConnectionError (no connection).
        """
        nc = self._conns.get(self._url_for(cluster))
        if nc is None or not nc.is_connected:
            raise ConnectionError(f"no NATS connection for cluster {cluster!r}")
        reply = await nc.request(subject, payload, timeout=deadline_s)
        return bytes(reply.data)

    def _count_malformed(self, kind: str, node: str, exc: Exception) -> None:
        self.malformed[kind] += 1
        log.warning("dropped malformed %s from %s: %s", kind, node or "?", exc)

    async def _respond(self, msg: Msg, payload: Any) -> None:
        if msg.reply:
            try:
                await msg.respond(encode(payload))
            except Exception as exc:
                log.debug("could not reply on %s: %s", msg.subject, exc)

    async def _handle_register(self, msg: Msg) -> None:
        node = Subjects.node_from_subject(msg.subject)
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
            ack = await self._on_register(node, register)
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
            await self._on_heartbeat(node, heartbeat)
        except Exception:
            log.exception("heartbeat of %s failed", node)

    async def _handle_report(self, msg: Msg) -> None:
        node = Subjects.node_from_subject(msg.subject)
        try:
            report = decode(msg.data, StatusReportV1)
        except MessageError as exc:
            self._count_malformed("report", node, exc)
            return
        try:
            await self._on_report(node, report)
        except Exception:
            # No ack: the agent keeps the report in its outbox and sends it again.
            log.exception("report %s of %s failed", report.report_id, node)
            return
        await self._respond(msg, ReportAckV1(report_id=report.report_id))
