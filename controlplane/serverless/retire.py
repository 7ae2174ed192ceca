"""Instances of deleted functions are stopped on their nodes: at the delete, and again whenever a
heartbeat still lists one (a node that was away when the function went), at most every
``resend_s`` per node and function. Without this, warm workers of a deleted function would run
until their keep-alive ran out (hours, under a learned keep-alive)."""

from __future__ import annotations

import logging
import time
import uuid

from edgeplane_contract.messages import FunctionInstance, RetireAckV1, RetireV1, decode, encode

from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.registry import FunctionRegistry
from controlplane.serverless.warmth import Spawn

__all__ = ["Retirements"]

log = logging.getLogger("edgeplane.hub.functions")


class Retirements:
    def __init__(
        self, hub: FunctionHost, registry: FunctionRegistry, spawn: Spawn, *, resend_s: float = 10.0
    ) -> None:
        self.hub = hub
        self.registry = registry
        self._spawn = spawn
        self.resend_s = resend_s
        self._sent: dict[tuple[str, str], float] = {}

    def deleted(self, function: str, instances: dict[str, dict[str, FunctionInstance]]) -> None:
        """``function`` was deleted: tell every node that runs an instance of it."""
        for node, known in instances.items():
            if any(i.function == function for i in known.values()):
                self._retire(node, function)

    def heard(self, node: str, instances: list[FunctionInstance]) -> None:
        """A heartbeat listed ``instances``: those of functions no longer registered are retired."""
        if not instances or not self.registry.loaded:
            return
        specs = self.registry.specs
        # O(instances), never O(registered functions): this runs for every heartbeat.
        for function in {i.function for i in instances if i.function not in specs}:
            self._retire(node, function)

    def _retire(self, node: str, function: str) -> None:
        now = time.monotonic()
        if now - self._sent.get((node, function), -self.resend_s) < self.resend_s:
            return
        self._sent[(node, function)] = now
        self._spawn(self._send(node, function))

    async def _send(self, node: str, function: str) -> None:
        live = self.hub.nodes.get(node)
        if live is None:
            return
        request = RetireV1(request_id=uuid.uuid4().hex, function=function)
        bus = self.hub.bus
        try:
            data = await bus.request(
                live.cluster, bus.subjects(live.cluster).retire(node), encode(request), deadline_s=5.0
            )
            ack = decode(data, RetireAckV1)
        except Exception as exc:  # the next heartbeat that lists an instance tries again
            log.info("retiring %s on %s: no answer (%s); retried at a later heartbeat", function, node, exc)
            return
        log.info(
            "deleted function %s on %s: %d instance(s) stopped, %d finishing",
            function, node, ack.stopped, ack.draining,
        )  # fmt: skip
