"""Telemetry and the heartbeat loop: while registered, the node's state to the hub every interval."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from edgeplane_contract.messages import HeartbeatV1, Subjects, Telemetry, encode

from edge_agent.config import AgentConfig
from edge_agent.executor import ProcessRunner
from edge_agent.functions.pool import FunctionPool
from edge_agent.hub_link import HubLink
from edge_agent.local_decisions import LocalDecider
from edge_agent.telemetry import GpuReader, PowerReader, SystemReader
from edge_agent.telemetry.node_power import NodePower, RaplReader
from edge_agent.weights import current_weights

__all__ = ["Heartbeats"]

log = logging.getLogger("edgeplane.agent")


class Heartbeats:
    """Reads the node's telemetry (:meth:`telemetry`) and publishes heartbeats (:meth:`loop`)."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        subjects: Subjects,
        boot_id: str,
        system: SystemReader,
        power: PowerReader,
        gpus: GpuReader,
        decider: LocalDecider,
        runner: ProcessRunner,
        functions: FunctionPool,
        link: HubLink,
        registered: asyncio.Event,
        counters: Counter[str],
    ) -> None:
        self.config = config
        self.subjects = subjects
        self.boot_id = boot_id
        self.system = system
        self.power = power
        self.gpus = gpus
        self.decider = decider
        self.runner = runner
        self.functions = functions
        self.link = link
        self.registered = registered
        self.counters = counters
        self._seq = 0
        self.node_power = NodePower(config.node_type, RaplReader(config.powercap_path))

    def telemetry(self) -> Telemetry:
        sample = self.system.read()
        power = self.power.read()
        policy = self.decider.policy
        gpus = self.gpus.read()
        watts, method = self.node_power.read(power, sample.cpu_percent, gpus)
        return Telemetry(
            cpu_percent=sample.cpu_percent,
            memory_used_bytes=sample.memory_used_bytes,
            memory_total_bytes=sample.memory_total_bytes,
            load_1m=sample.load_1m,
            power_source=power.source,
            battery_percent=power.battery_percent,
            power_w=round(watts, 3),
            power_method=method,
            gpus=gpus,
            weights=list(current_weights(self.decider.reward_config, power)),
            policy=policy.source if policy is not None else "",
        )

    async def loop(self) -> None:
        interval = self.config.heartbeat_interval_s
        while True:
            nc = self.link.nc
            if nc is not None and nc.is_connected and self.registered.is_set():
                self._seq += 1
                heartbeat = HeartbeatV1(
                    node=self.config.name,
                    boot_id=self.boot_id,
                    seq=self._seq,
                    sent_at=time.time(),
                    telemetry=self.telemetry(),
                    running=self.runner.running_ids(),
                    instances=self.functions.snapshot(),
                    policy_version=self.decider.policy_version,
                    policy_regret=self.decider.quality.take(),
                )
                try:
                    await nc.publish(self.subjects.heartbeat(self.config.name), encode(heartbeat))
                    self.counters["heartbeats"] += 1
                except Exception as exc:
                    log.debug("heartbeat not sent: %s", exc)
            await asyncio.sleep(interval)
