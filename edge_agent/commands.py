"""The hub's commands to this node (run, stop): validated, answered once each, repeats answered
with the first answer.

Commands run concurrently, so that a start waiting on the kernel (fork, cgroup joins, exec: 8-40 ms)
does not hold the ones queued behind it; the commands of one placement still run in the order
they came (a stop waits for its placement's start), and a repeat of a command still running is
answered, once that one ends, with its answer. A run of a new placement is answered on receipt
(accepted), before its process starts: the start's outcome is the placement's state report. An
agent that dies in between comes back without the placement, which the hub then ends Lost and
places again (``Hub._reconcile_agent_placements``): nothing accepted is lost, and the process
never ran, so nothing runs twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

from nats.aio.msg import Msg

from edgeplane_contract.messages import CommandAckV1, CommandV1, MessageError, decode

from edge_agent.executor import ProcessRunner, RunningPlacement
from edge_agent.hub_link import HubLink

__all__ = ["Commands"]

log = logging.getLogger("edgeplane.agent")

# How many command answers are kept to answer a repeated command the same way.
ACKS_KEPT = 10_000


class Commands:
    """Handles ``command`` messages; ``spawn`` runs a stop in the background (the agent tracks it)."""

    def __init__(
        self,
        *,
        runner: ProcessRunner,
        link: HubLink,
        counters: Counter[str],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
    ) -> None:
        self.runner = runner
        self.link = link
        self.counters = counters
        self.spawn = spawn
        self._acks: OrderedDict[str, CommandAckV1] = OrderedDict()
        # Commands being executed, by command id (a repeat waits for the first's answer) ...
        self._running: dict[str, asyncio.Task[CommandAckV1]] = {}
        # ... and the last one of each placement (the next one of that placement waits for it).
        self._last_of: dict[str, asyncio.Task[CommandAckV1]] = {}

    async def on_command(self, msg: Msg) -> None:
        try:
            command = decode(msg.data, CommandV1)
            if command.kind not in ("run", "stop"):
                raise MessageError("command", f"unknown kind {command.kind!r}", field="kind")
            if command.kind == "run" and (command.spec is None or not command.spec.command):
                raise MessageError("command", "run needs a spec with a command", field="spec")
        except MessageError as exc:
            self.link.malformed("command", exc)
            await self.link.reply(msg, CommandAckV1(command_id="", accepted=False, reason=str(exc)))
            return
        self.counters["commands"] += 1
        self.link.heard_hub()
        previous = self._acks.get(command.command_id)
        if previous is not None:
            self.counters["duplicate_commands"] += 1
            await self.link.reply(msg, dataclasses.replace(previous, duplicate=True))
            return
        running = self._running.get(command.command_id)
        if running is not None:
            self.counters["duplicate_commands"] += 1
            self.spawn(self._answer_repeat(msg, running))
            return
        task = self.spawn(self._run(msg, command, self._last_of.get(command.placement_id)))
        self._running[command.command_id] = task
        self._last_of[command.placement_id] = task
        task.add_done_callback(lambda done: self._ended(command, done))

    def _ended(self, command: CommandV1, task: asyncio.Task[CommandAckV1]) -> None:
        self._running.pop(command.command_id, None)
        if self._last_of.get(command.placement_id) is task:
            del self._last_of[command.placement_id]

    async def _run(
        self, msg: Msg, command: CommandV1, before: asyncio.Task[CommandAckV1] | None
    ) -> CommandAckV1:
        """Execute ``command`` once ``before`` (its placement's previous command) has ended, keep
        the answer for repeats and send it. Cancelled (the agent stops): unanswered, so the hub
        sends it again."""
        if before is not None:
            await asyncio.wait([before])
        accepted: RunningPlacement | None = None
        try:
            ack, accepted = self.execute(command)
        except Exception as exc:  # never leave a command unanswered
            log.exception("command %s failed", command.command_id)
            ack = CommandAckV1(command_id=command.command_id, accepted=False, reason=f"agent error: {exc}")
        await self.link.reply(msg, self._keep(ack))
        if accepted is not None:
            # Answered on receipt: the hub's round goes on while the process starts (a fork and
            # the cgroup joins, 10-40 ms here); how the start went is the placement's state report
            # (Running, or Failed with the exec error), as for any later change. This task ends
            # only once the start has, so a stop of the placement still waits for it.
            await self.runner.launch(accepted)
        return ack

    def _keep(self, ack: CommandAckV1) -> CommandAckV1:
        """Remember ``ack`` to answer a repeat of its command the same way."""
        self._acks[ack.command_id] = ack
        while len(self._acks) > ACKS_KEPT:
            self._acks.popitem(last=False)
        return ack

    async def _answer_repeat(self, msg: Msg, first: asyncio.Task[CommandAckV1]) -> None:
        ack = await asyncio.shield(first)
        await self.link.reply(msg, dataclasses.replace(ack, duplicate=True))

    def execute(self, command: CommandV1) -> tuple[CommandAckV1, RunningPlacement | None]:
        """The answer to ``command``, and the placement a new run took on (its process is yet to
        be launched), else None."""
        ack = CommandAckV1(command_id=command.command_id, accepted=True)
        if command.kind == "run":
            assert command.spec is not None
            if self.runner.knows(command.placement_id):
                return dataclasses.replace(ack, duplicate=True), None
            if command.placement_id in self.runner.tombstones:
                return dataclasses.replace(ack, accepted=False, reason="placement was stopped"), None
            return ack, self.runner.accept(command.placement_id, command.workload_id, command.spec)
        if not self.runner.knows(command.placement_id):
            self.runner.tombstones.add(command.placement_id)
            return dataclasses.replace(ack, reason="unknown placement"), None
        self.spawn(self.runner.stop(command.placement_id))
        return ack, None
