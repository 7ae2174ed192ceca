"""Registration with the hub (retried until accepted, again after every reconnect or hub hello),
and the resume after a restart of the work a previous run left, as the hub confirms it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from edgeplane_contract.aio import wait_set
from edgeplane_contract.messages import (
    NodeResources,
    PlacementState,
    RegisterAckV1,
    RegisterV1,
    Subjects,
    Telemetry,
    decode,
    encode,
)

from edge_agent import __version__
from edge_agent.config import AgentConfig
from edge_agent.confinement import Confinement
from edge_agent.executor import ProcessRunner
from edge_agent.hub_link import HubLink
from edge_agent.outbox import DurableOutbox
from edge_agent.telemetry import GpuReader, SystemReader
from edge_agent.work_dir_usage import free_bytes

__all__ = ["RETRY_AFTER_JITTER", "RETRY_AFTER_MAX_S", "Registration", "retry_delay"]

log = logging.getLogger("edgeplane.agent")


# A hub's "retry after" is honoured within these bounds (a hub's figure, not a promise to wait
# forever), spread by a random factor so that a deferred fleet does not come back in one wave.
RETRY_AFTER_MAX_S = 120.0
RETRY_AFTER_JITTER = (0.8, 1.3)


class _RegisterRejected(Exception):
    pass


class _RegisterDeferred(Exception):
    """The hub is admitting other registrations and gave this one a later turn."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(f"the hub asks to register again in {delay_s:.1f}s")
        self.delay_s = delay_s


def retry_delay(retry_after_s: float, rng: random.Random | None = None) -> float:
    """How long to wait before registering again when the hub answered ``retry_after_s``: that,
    bounded, times a random factor of ``RETRY_AFTER_JITTER``."""
    low, high = RETRY_AFTER_JITTER
    bounded = min(max(retry_after_s, 0.1), RETRY_AFTER_MAX_S)
    return bounded * (rng or random).uniform(low, high)


_backoff = wait_exponential(multiplier=0.2, max=10.0)


def _register_wait(state: RetryCallState) -> float:
    """The hub's turn when it gave one (``retry_after_s``), else exponential backoff."""
    failed = state.outcome.exception() if state.outcome is not None else None
    if isinstance(failed, _RegisterDeferred):
        return failed.delay_s
    return float(_backoff(state))


class Registration:
    """Registers this boot of the node (:meth:`trigger`) and resumes earlier work (:meth:`resume`).

    ``registered`` is set while the hub has accepted this agent; ``on_registered`` runs on each
    acceptance (the reports waiting in the outbox can go).
    """

    def __init__(
        self,
        *,
        config: AgentConfig,
        subjects: Subjects,
        boot_id: str,
        system: SystemReader,
        gpus: GpuReader,
        telemetry: Callable[[], Telemetry],
        runner: ProcessRunner,
        outbox: DurableOutbox,
        confinement: Confinement,
        link: HubLink,
        registered: asyncio.Event,
        on_registered: Callable[[], None],
        counters: Counter[str],
    ) -> None:
        self.config = config
        self.subjects = subjects
        self.boot_id = boot_id
        self.system = system
        self.gpus = gpus
        self.telemetry = telemetry
        self.runner = runner
        self.outbox = outbox
        self.confinement = confinement
        self.link = link
        self.registered = registered
        self.on_registered = on_registered
        self.counters = counters
        self.hub_id = ""
        self.task: asyncio.Task[None] | None = None
        # The hub's answer to the first registration after a restart: which placements to resume.
        self._confirmed = asyncio.Event()
        self._hub_keep: list[str] | None = None

    def trigger(self) -> None:
        """Register (again) from scratch, dropping an attempt under way."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.task = asyncio.create_task(self._until_accepted(), name="register")

    def message(self) -> RegisterV1:
        sample = self.system.read()
        gpus = self.gpus.read()
        return RegisterV1(
            node=self.config.name,
            cluster=self.config.cluster,
            boot_id=self.boot_id,
            agent_version=__version__,
            resources=NodeResources(
                cpu=self.config.cpu or sample.cpu_count,
                memory=self.config.memory or sample.memory_total_bytes,
                gpus=gpus,
                dpu=self.config.dpu,
                # What units may write: the free space where their work dirs live.
                ephemeral_storage=free_bytes(self.confinement.sandbox_root),
            ),
            heartbeat_interval_s=self.config.heartbeat_interval_s,
            labels=self.config.labels,
            node_type=self.config.node_type,
            telemetry=self.telemetry(),
            placements=self.known_states(),
            isolation=dict(self.confinement.report),
        )

    def known_states(self) -> list[PlacementState]:
        """What the registration tells the hub: the placements running, those waiting to be
        resumed (as running: the hub's answer says whether to), and final states still queued
        from before a restart (a workload that finished while the hub was away)."""
        states = [*self.runner.states(), *self.runner.resumable()]
        listed = {s.placement_id for s in states}
        states += [s for s in self.outbox.latest_states() if s.placement_id not in listed]
        return [dataclasses.replace(s) for s in states]

    async def _until_accepted(self) -> None:
        self.registered.clear()
        async for attempt in AsyncRetrying(wait=_register_wait, retry=retry_if_exception_type(Exception)):
            with attempt:
                nc = self.link.nc
                if nc is None or not nc.is_connected:
                    raise ConnectionError("not connected")
                reply = await nc.request(
                    self.subjects.register(self.config.name), encode(self.message()), timeout=3
                )
                ack = decode(reply.data, RegisterAckV1)
                if not ack.accepted and ack.retry_after_s is not None:
                    self.counters["register_deferred"] += 1
                    delay = retry_delay(ack.retry_after_s)
                    log.info("hub busy admitting registrations: registering again in %.1fs", delay)
                    raise _RegisterDeferred(delay)
                if not ack.accepted:
                    self.counters["register_refused"] += 1
                    log.error("hub refused registration: %s", ack.reason)
                    raise _RegisterRejected(ack.reason)
                self.hub_id = ack.hub_id
                self._hub_keep = ack.keep
        self.link.heard_hub()
        self._confirmed.set()
        self.counters["registrations"] += 1
        self.registered.set()
        self.on_registered()
        log.info("registered with hub %s", self.hub_id)

    async def resume(self, undecided: list[PlacementState]) -> None:
        """Resume what the hub confirms; without its word in time, all of it if the hub was heard
        within the autonomy window, else nothing (the hub has likely moved it: it would run twice)."""
        ids = {s.placement_id for s in undecided}
        if not await wait_set(self._confirmed, self.config.resume_confirm_s):
            heard = self.link.last_hub_contact()
            silent = time.time() - heard if heard is not None else None
            if silent is not None and silent <= self.config.autonomy_window_s:
                only = ids
                log.info(
                    "no hub answer within %.0fs; resuming %d placement(s): the hub was heard %.0fs ago, "
                    "within the autonomy window (%.0fs)",
                    self.config.resume_confirm_s, len(ids), silent, self.config.autonomy_window_s,
                )  # fmt: skip
            else:
                only = set()
                log.warning(
                    "no hub answer within %.0fs and the hub was last heard %s: not resuming %d "
                    "placement(s) (beyond the autonomy window of %.0fs, the hub may have moved them)",
                    self.config.resume_confirm_s,
                    "never" if silent is None else f"{silent:.0f}s ago",
                    len(ids),
                    self.config.autonomy_window_s,
                )
        else:
            keep = self._hub_keep
            only = ids if keep is None else ids & set(keep)
            if ids - only:
                log.info("not resuming %s: the hub no longer wants them here", ", ".join(sorted(ids - only)))
        resumed = await self.runner.resume(only=only)
        for placement_id in ids - only:
            self.confinement.discard(placement_id)
        if resumed:
            log.info(
                "resumed %d placement(s) after a restart: %s",
                len(resumed),
                ", ".join(f"{s.placement_id} {s.state}" for s in resumed),
            )
