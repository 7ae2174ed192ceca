"""Command dispatch: which run and stop commands are due, sending them, and what an answer means.

A command is sent until its agent acknowledges it, at most once per ack timeout; agents dedupe by
command id, so a resend is harmless. ``ack_effect`` is the pure rule for an answer; the hub applies
it to the placement (``hub.service``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.aio import log_failure
from edgeplane_contract.messages import CommandAckV1, CommandV1

from controlplane.bus.hub_bus import HubBus, MessageTooLargeError
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.spec_cache import SpecCache
from controlplane.specs.workload import WorkloadSpec
from controlplane.store import queries
from controlplane.store.models import PlacementRow
from controlplane.store.store import Store

__all__ = ["AckEffect", "Dispatcher", "Sent", "ack_effect"]

log = logging.getLogger("edgeplane.hub")

# Stale copies already told of (log line and event), by placement id: each once, a bounded memory.
_STALE_NOTED_KEPT = 10_000


class AckEffect(enum.Enum):
    NONE = "none"  # no answer (or not to this command): sent again after the ack timeout
    RUN_ACKED = "run_acked"  # the agent runs it
    RUN_REFUSED = "run_refused"  # the placement is Lost (placed again elsewhere)
    TOO_LARGE = "too_large"  # can never be sent: the placement Fails with the reason
    STOP_ACKED = "stop_acked"
    NEVER_RAN = "never_ran"  # a stop the agent never had: the placement is Cancelled


def ack_effect(command: CommandV1, answer: CommandAckV1 | BaseException | None) -> AckEffect:
    """What an agent's answer to ``command`` (or the error sending it) means for its placement."""
    if isinstance(answer, MessageTooLargeError):
        return AckEffect.TOO_LARGE if command.kind == "run" else AckEffect.NONE
    if not isinstance(answer, CommandAckV1) or answer.command_id != command.command_id:
        return AckEffect.NONE
    if command.kind == "run":
        return AckEffect.RUN_ACKED if answer.accepted else AckEffect.RUN_REFUSED
    if not answer.accepted:
        return AckEffect.NONE
    return AckEffect.NEVER_RAN if answer.reason == "unknown placement" else AckEffect.STOP_ACKED


@dataclass(slots=True)
class Sent:
    placement_id: str
    command: CommandV1
    answer: CommandAckV1 | BaseException | None
    effect: AckEffect  # ack_effect(command, answer), worked out once


class Dispatcher:
    """Sends the hub's commands to agents; remembers when each was last sent."""

    def __init__(
        self,
        bus: HubBus,
        nodes: Mapping[str, NodeLive],
        *,
        resend_after_s: float,
        store: Store | None = None,
        specs: SpecCache | None = None,
    ) -> None:
        """``store``: where a stopped stale copy is recorded (a ``StaleCopyStopped`` event);
        ``specs``: the hub's parsed workload specs."""
        self.bus = bus
        self.nodes = nodes
        self.resend_after_s = resend_after_s
        self.store = store
        self.specs = specs if specs is not None else SpecCache()  # an empty cache is falsy
        self._last_sent: dict[str, float] = {}
        self._background: set[asyncio.Task[object]] = set()
        self._stale_noted: OrderedDict[str, None] = OrderedDict()

    def _due(self, key: str, now: float, every_s: float) -> bool:
        return now - self._last_sent.get(key, -1e9) >= every_s

    async def due(self, s: AsyncSession) -> list[tuple[PlacementRow, CommandV1]]:
        """Run commands not yet acknowledged, then stop commands, whose last send is older than
        the ack timeout, for placements on Ready nodes; each is marked sent now. Only the
        placements with a command to send are read; specs come parsed from ``specs``."""
        now = asyncio.get_running_loop().time()
        runs: list[tuple[PlacementRow, CommandV1]] = []
        stops: list[tuple[PlacementRow, CommandV1]] = []
        want_run: list[PlacementRow] = []
        for placement in await queries.unsent_placements(s):
            live = self.nodes.get(placement.node)
            if live is None or live.status != "Ready":
                continue
            if placement.stop_command_id and not placement.stop_acked:
                if self._due(placement.stop_command_id, now, self.resend_after_s):
                    stops.append((placement, _stop(placement.stop_command_id, placement)))
            elif not placement.acked and not placement.stop_command_id:
                if self._due(placement.command_id, now, self.resend_after_s):
                    want_run.append(placement)
        specs = await self.specs.load(s, [p.workload_id for p in want_run]) if want_run else {}
        for placement in want_run:
            spec = specs.get(placement.workload_id)
            if spec is not None:
                runs.append((placement, _run(placement, spec)))
        for _, command in runs + stops:
            self._last_sent[command.command_id] = now
        return runs + stops

    def runs_of(
        self, placed: list[tuple[PlacementRow, WorkloadSpec]]
    ) -> list[tuple[PlacementRow, CommandV1]]:
        """The run commands of placements a round has just written (committed), for Ready nodes,
        each marked sent now: the round sends them at once, and :meth:`due` then sends them
        again only after the ack timeout, as any other."""
        now = asyncio.get_running_loop().time()
        runs = []
        for placement, spec in placed:
            live = self.nodes.get(placement.node)
            if live is None or live.status != "Ready":
                continue
            self._last_sent[placement.command_id] = now
            runs.append((placement, _run(placement, spec)))
        return runs

    async def send(self, due: list[tuple[PlacementRow, CommandV1]]) -> list[Sent]:
        """Send all at once and wait for the answers (each bounded by the bus's ack timeout)."""
        return await self.answers(due, self.start_sending(due))

    def start_sending(
        self, due: list[tuple[PlacementRow, CommandV1]]
    ) -> list[asyncio.Task[CommandAckV1 | None]]:
        """One task per command, each publishing it at its first turn (the client's flusher
        writes them at the next): :meth:`answers` waits for what they bring back."""
        return [asyncio.ensure_future(self.bus.send_command(p.cluster, p.node, cmd)) for p, cmd in due]

    async def answers(
        self, due: list[tuple[PlacementRow, CommandV1]], sending: list[asyncio.Task[CommandAckV1 | None]]
    ) -> list[Sent]:
        """The answers to ``due`` that ``sending`` (its :meth:`start_sending`) brought back."""
        answers = await asyncio.gather(*sending, return_exceptions=True)
        sent = []
        for (placement, command), answer in zip(due, answers, strict=True):
            effect = ack_effect(command, answer)
            answered = isinstance(answer, CommandAckV1) and answer.command_id == command.command_id
            if answered or effect is AckEffect.TOO_LARGE:
                self._last_sent.pop(command.command_id, None)  # settled: never sent again
            sent.append(Sent(placement.id, command, answer, effect))
        return sent

    def stop_orphan(self, node: str, placement_id: str, workload_id: str) -> None:
        """Stop a process the hub does not (or no longer) want, e.g. one re-placed after a lease
        expiry; fire and forget, at most once per two ack timeouts."""
        key = f"orphan:{placement_id}"
        now = asyncio.get_running_loop().time()
        if not self._due(key, now, self.resend_after_s * 2):
            return
        self._last_sent[key] = now
        live = self.nodes.get(node)
        if live is None:
            return
        command = CommandV1(
            command_id=uuid.uuid4().hex, kind="stop", placement_id=placement_id, workload_id=workload_id
        )
        task = asyncio.create_task(self._stop_stale_copy(live.cluster, node, command))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_failure)  # fire and forget: a failure is logged, not lost

    async def _stop_stale_copy(self, cluster: str, node: str, command: CommandV1) -> None:
        """Send one stop of a stale copy; once its node says it stopped it, say so once (an INFO
        line and a ``StaleCopyStopped`` event): a copy stopped after a long partition is visible."""
        try:
            answer = await self.bus.send_command(cluster, node, command)
        except Exception as exc:  # fire and forget: the next heartbeat that lists it sends again
            log.debug("stop of stale copy %s on %s not sent: %s", command.placement_id, node, exc)
            return
        if (
            ack_effect(command, answer) is not AckEffect.STOP_ACKED
            or command.placement_id in self._stale_noted
        ):
            return  # no answer, refused, or the node no longer had it (nothing was stopped)
        self._stale_noted[command.placement_id] = None
        if len(self._stale_noted) > _STALE_NOTED_KEPT:
            self._stale_noted.popitem(last=False)
        if self.store is None:
            log.info(
                "stopped a stale copy of placement %s on node %s: the hub no longer wants it there",
                command.placement_id, node,
            )  # fmt: skip
            return
        try:
            async with self.store.session() as s:
                # A heartbeat names only the placement: its workload is in the store.
                row = await s.get(PlacementRow, command.placement_id)
                workload = command.workload_id or (row.workload_id if row is not None else "?")
                log.info(
                    "stopped a stale copy of placement %s (workload %s) on node %s: the hub no "
                    "longer wants it there",
                    command.placement_id, workload, node,
                )  # fmt: skip
                Store.add_event(
                    s,
                    "StaleCopyStopped",
                    "placement",
                    command.placement_id,
                    f"stale copy on node {node} stopped (workload {workload}): the hub no longer wants it",
                    {"node": node, "workload_id": workload},
                )
        except Exception as exc:  # the copy is stopped; a failed record is logged, not raised
            log.warning("could not record the stop of stale copy %s: %s", command.placement_id, exc)

    def background(self) -> list[asyncio.Task[object]]:
        return list(self._background)


def _run(placement: PlacementRow, spec: WorkloadSpec) -> CommandV1:
    gpus = [int(i) for i in placement.assignment.get("gpu_indices", [])]
    return CommandV1(
        command_id=placement.command_id,
        kind="run",
        placement_id=placement.id,
        workload_id=placement.workload_id,
        spec=spec.run_spec(gpu_indices=gpus),
    )


def _stop(command_id: str, placement: PlacementRow) -> CommandV1:
    return CommandV1(
        command_id=command_id, kind="stop", placement_id=placement.id, workload_id=placement.workload_id
    )
