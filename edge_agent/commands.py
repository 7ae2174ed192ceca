"""The hub's commands to this node (run, stop): validated, answered once each, repeats answered
with the first answer."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

from nats.aio.msg import Msg

from edgeplane_contract.messages import CommandAckV1, CommandV1, MessageError, decode

from edge_agent.executor import ProcessRunner
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
        try:
            ack = await self.execute(command)
        except Exception as exc:  # never leave a command unanswered, never crash the subscription
            log.exception("command %s failed", command.command_id)
            ack = CommandAckV1(command_id=command.command_id, accepted=False, reason=f"agent error: {exc}")
        self._acks[command.command_id] = ack
        while len(self._acks) > ACKS_KEPT:
            self._acks.popitem(last=False)
        await self.link.reply(msg, ack)

    async def execute(self, command: CommandV1) -> CommandAckV1:
        if command.kind == "run":
            assert command.spec is not None
            if self.runner.knows(command.placement_id):
                return CommandAckV1(command_id=command.command_id, accepted=True, duplicate=True)
            if command.placement_id in self.runner.tombstones:
                return CommandAckV1(
                    command_id=command.command_id, accepted=False, reason="placement was stopped"
                )
            await self.runner.start(command.placement_id, command.workload_id, command.spec)
            return CommandAckV1(command_id=command.command_id, accepted=True)
        if not self.runner.knows(command.placement_id):
            self.runner.tombstones.add(command.placement_id)
            return CommandAckV1(command_id=command.command_id, accepted=True, reason="unknown placement")
        self.spawn(self.runner.stop(command.placement_id))
        return CommandAckV1(command_id=command.command_id, accepted=True)
