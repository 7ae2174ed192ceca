"""State reports to the hub: every placement state change queued in the durable outbox, and sent
in order, each until the hub acknowledges it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter

from nats.aio.client import Client as NATS

from edgeplane_contract.messages import PlacementState, ReportAckV1, StatusReportV1, Subjects, decode, encode

from edge_agent.config import AgentConfig
from edge_agent.hub_link import HubLink
from edge_agent.outbox import DurableOutbox

__all__ = ["OUTBOX_FILE", "Reports"]

log = logging.getLogger("edgeplane.agent")

OUTBOX_FILE = "outbox.sqlite3"
# Reports in flight at once: sent in order, acknowledged together by the hub's next batch.
REPORT_WINDOW = 64


class Reports:
    """Queues state changes (:meth:`on_state_change`) and sends them while registered (:meth:`loop`)."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        subjects: Subjects,
        outbox: DurableOutbox,
        link: HubLink,
        registered: asyncio.Event,
        counters: Counter[str],
    ) -> None:
        self.config = config
        self.subjects = subjects
        self.outbox = outbox
        self.link = link
        self.registered = registered
        self.counters = counters
        # Set when there may be something to send: a new report, a registration, a reconnect.
        self.wake = asyncio.Event()

    def on_state_change(self, state: PlacementState) -> None:
        report = StatusReportV1(
            report_id=uuid.uuid4().hex, node=self.config.name, placement=dataclasses.replace(state)
        )
        if len(self.outbox) >= self.config.outbox_limit:
            # The newest state of every placement is re-sent at registration, so dropping the
            # oldest queued report loses no final state.
            self.outbox.popleft()
            self.counters["reports_dropped"] += 1
        self.outbox.append(report)
        self.wake.set()

    async def loop(self) -> None:
        """Send the outbox's reports, up to ``REPORT_WINDOW`` in flight at once (the hub applies
        what arrives together in one transaction), oldest first; each leaves the outbox once the
        hub acknowledged it, and what was not is sent again after a backoff."""
        backoff = 0.2
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.outbox:
                nc = self.link.nc
                if nc is None or not nc.is_connected or not self.registered.is_set():
                    break
                window = self.outbox.head(REPORT_WINDOW)
                acks = await asyncio.gather(*(self._send(nc, report) for report in window))
                acked = [report for report, ok in zip(window, acks, strict=True) if ok]
                self.outbox.remove(acked)
                self.counters["reports_sent"] += len(acked)
                if len(acked) < len(window):
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                else:
                    backoff = 0.2
            if self.outbox:
                # Not connected or not registered: look again soon.
                await asyncio.sleep(0.5)
                self.wake.set()

    async def flush(self, within_s: float) -> int:
        """Send what the outbox holds before the agent exits (the final states of what its shutdown
        stopped), for at most ``within_s``, while :meth:`loop` no longer runs; what is not
        acknowledged stays in the outbox, sent at the next start. Returns the reports sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        sent = 0
        while self.outbox and (left := deadline - loop.time()) > 0:
            nc = self.link.nc
            if nc is None or not nc.is_connected or not self.registered.is_set():
                break
            window = self.outbox.head(REPORT_WINDOW)
            try:
                acks = await asyncio.wait_for(asyncio.gather(*(self._send(nc, r) for r in window)), left)
            except TimeoutError:
                break
            acked = [report for report, ok in zip(window, acks, strict=True) if ok]
            self.outbox.remove(acked)
            sent += len(acked)
            if len(acked) < len(window):
                break
        self.counters["reports_sent"] += sent
        return sent

    async def _send(self, nc: NATS, report: StatusReportV1) -> bool:
        """One report sent; True once the hub acknowledged it."""
        try:
            reply = await nc.request(self.subjects.report(self.config.name), encode(report), timeout=2)
            ack = decode(reply.data, ReportAckV1)
        except Exception as exc:
            log.debug("report %s not acknowledged yet: %s", report.report_id, exc)
            return False
        return ack.report_id == report.report_id
