"""The edge agent: registers with the hub, heartbeats telemetry, runs placed work, reports back.

It survives NATS or hub outages: running work keeps running, state reports wait in a bounded
outbox (and the full state is re-sent on every (re-)registration), and the connection comes back
through nats-py's reconnect loop after a first connect retried with backoff (tenacity).

Without the hub it keeps deciding for the work it already has, with the same local policy that
answers the hub's bids (:meth:`Agent.local_decision`): how to restart a placement whose process
exited (``restart_policy``; :mod:`edge_agent.restarts`), and, while NATS is down, whether each
idle warm function instance stays warm.

:class:`Agent` wires the parts together and runs them: the link to the hub
(:mod:`edge_agent.hub_link`), registration and resume (:mod:`edge_agent.registration`),
heartbeats (:mod:`edge_agent.heartbeats`), commands (:mod:`edge_agent.commands`), state reports
(:mod:`edge_agent.reports`), function invocations (:mod:`edge_agent.invocations`), the local
policy (:mod:`edge_agent.local_decisions`, :mod:`edge_agent.bids`, :mod:`edge_agent.autonomy`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from edgeplane_contract.aio import stop_task
from edgeplane_contract.messages import HubHelloV1, MessageError, PlacementState, Subjects, decode

from edge_agent.autonomy import OfflineScaler, advise_restart
from edge_agent.bids import Bids
from edge_agent.cgroup_primer import CgroupPrimer
from edge_agent.cgroups import CpuLimiter, NoCpuLimit, detect_cpu_limiter
from edge_agent.commands import Commands
from edge_agent.config import AgentConfig
from edge_agent.confinement import Confinement
from edge_agent.decisions import DecisionLog
from edge_agent.executor import ProcessRunner, RunningPlacement
from edge_agent.exit_records import ExitRecords
from edge_agent.functions.pool import FunctionPool
from edge_agent.heartbeats import Heartbeats
from edge_agent.hub_link import HubLink
from edge_agent.invocations import Invocations
from edge_agent.load_profile import LoadSampler
from edge_agent.local_decisions import LocalDecider
from edge_agent.logs import LogFiles, LogService
from edge_agent.metrics import AgentState, MetricsServer, agent_registry
from edge_agent.outbox import FINAL_STATES, DurableOutbox
from edge_agent.policy_updates import PolicyUpdates, load_current
from edge_agent.registration import Registration
from edge_agent.reports import OUTBOX_FILE, Reports
from edge_agent.restarts import Backoff, RestartChoice
from edge_agent.telemetry import (
    GpuReader,
    NvmlGpuReader,
    PowerReader,
    ProcPressureReader,
    PsutilBusyReader,
    PsutilSystemReader,
    SysfsPowerReader,
    SystemReader,
)

__all__ = ["Agent"]

log = logging.getLogger("edgeplane.agent")
# Seconds the shutdown waits for the hub to acknowledge the final states of what it stopped.
SHUTDOWN_FLUSH_S = 3.0


class Agent:
    """One edge node's agent. ``await agent.run()`` until ``agent.request_stop()``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        system: SystemReader | None = None,
        power: PowerReader | None = None,
        gpus: GpuReader | None = None,
    ) -> None:
        self.config = config
        self.subjects = Subjects(cluster=config.cluster, prefix=config.subject_prefix)
        self.system = system or PsutilSystemReader()
        self.power = power or SysfsPowerReader(config.power_supply_path)
        self.gpus = gpus or NvmlGpuReader()
        self.boot_id = uuid.uuid4().hex
        self.decisions = DecisionLog(limit=config.decision_log_limit, epsilon=config.privacy_epsilon)
        cpu_limiter: CpuLimiter = NoCpuLimit()
        if config.cpu_limits:
            cpu_limiter = detect_cpu_limiter(config.name, cgroup_root=config.cgroup_root)
        # What user code runs confined by, worked out once; the hub learns it at registration.
        self.confinement = Confinement.detect(
            node=config.name,
            work_dir=Path(config.work_dir),
            sandbox_root=Path(config.sandbox_root) if config.sandbox_root else None,
            run_as=config.run_as,
            pids_max=config.pids_max,
            cgroup_root=config.cgroup_root,
            cpu_quota=cpu_limiter.name,
        )
        # The node's CPU load while placements run (one sampler for all of them): a success
        # reports it, and the hub learns interference from it.
        self.load = LoadSampler(PsutilBusyReader(), pressure=ProcPressureReader())
        self.runner = ProcessRunner(
            work_dir=Path(config.work_dir),
            on_change=self._on_state_change,
            stop_grace_s=config.stop_grace_s,
            restart_advisor=self._advise_restart,
            backoff=Backoff(config.restart_backoff_s, config.restart_backoff_max_s),
            state_file=Path(config.work_dir) / "placements.json",
            cpu_limiter=cpu_limiter,
            confinement=self.confinement,
            load=self.load,
            exit_records=ExitRecords.for_work_dir(Path(config.work_dir)),
        )
        self.functions = FunctionPool(
            work_dir=Path(config.work_dir),
            memory_budget=config.function_memory
            or (config.memory or self.system.read().memory_total_bytes) // 2,
            node=config.name,
            confinement=self.confinement,
        )
        # Reports not yet acknowledged; final states survive an agent restart (outbox.sqlite3).
        self.outbox = DurableOutbox(Path(config.work_dir) / OUTBOX_FILE)
        self.counters: Counter[str] = Counter()
        self.registered = asyncio.Event()
        self.link = HubLink(config, self.counters)
        self.logs = LogService(
            LogFiles(
                Path(config.work_dir), max_bytes=config.log_max_bytes, retention_s=config.log_retention_s
            ),
            self.link,
            live=lambda: {*self.runner.running_ids(), *self.functions.instances},
        )
        self.decider = LocalDecider(
            config=config,
            system=self.system,
            power=self.power,
            gpus=self.gpus,
            runner=self.runner,
            functions=self.functions,
            decisions=self.decisions,
            counters=self.counters,
        )
        self.policy_updates = PolicyUpdates(
            policy_dir=Path(config.work_dir) / "policy",
            hub_public_key=config.hub_public_key,
            shipped=config.policy_model,
            enabled=config.local_policy,
            install=self._install_policy,
        )
        self.reports = Reports(
            config=config,
            subjects=self.subjects,
            outbox=self.outbox,
            link=self.link,
            registered=self.registered,
            counters=self.counters,
        )
        self.heartbeats = Heartbeats(
            config=config,
            subjects=self.subjects,
            boot_id=self.boot_id,
            system=self.system,
            power=self.power,
            gpus=self.gpus,
            decider=self.decider,
            runner=self.runner,
            functions=self.functions,
            link=self.link,
            registered=self.registered,
            counters=self.counters,
        )
        self.registration = Registration(
            config=config,
            subjects=self.subjects,
            boot_id=self.boot_id,
            system=self.system,
            gpus=self.gpus,
            telemetry=self.heartbeats.telemetry,
            runner=self.runner,
            outbox=self.outbox,
            confinement=self.confinement,
            link=self.link,
            registered=self.registered,
            on_registered=self.reports.wake.set,
            counters=self.counters,
        )
        self.commands = Commands(
            runner=self.runner,
            link=self.link,
            counters=self.counters,
            spawn=self._spawn,
        )
        self.invocations = Invocations(
            work_dir=Path(config.work_dir),
            functions=self.functions,
            link=self.link,
            counters=self.counters,
            spawn=self._spawn,
        )
        self.primer = CgroupPrimer.detect(self.confinement.groups)
        self.bids = Bids(
            node=config.name,
            decider=self.decider,
            decisions=self.decisions,
            link=self.link,
            counters=self.counters,
            on_accept=self.primer.expect_start,
        )
        self.offline = OfflineScaler(
            config=config,
            decider=self.decider,
            functions=self.functions,
            link=self.link,
            counters=self.counters,
        )
        self.metrics: MetricsServer | None = None
        if config.metrics_listen is not None:
            self.metrics = MetricsServer(agent_registry(self._metrics_state()), *config.metrics_listen)
        self._resume_task: asyncio.Task[None] | None = None
        self._load_task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    # --- what callers and tests see of the parts ---------------------------------------------

    @property
    def policy(self) -> Any:
        """The local policy (a LocalPolicy; None until :meth:`run` loads it, or when it is off)."""
        return self.decider.policy

    @policy.setter
    def policy(self, policy: Any) -> None:
        self.decider.policy = policy

    @property
    def reward_config(self) -> Any:
        """The reward weights' configuration the local policy and the telemetry use."""
        return self.decider.reward_config

    @property
    def hub_id(self) -> str:
        """The hub that accepted the last registration ("" before one)."""
        return self.registration.hub_id

    @property
    def _nc(self) -> NATS | None:
        return self.link.nc

    def hub_reachable(self) -> bool:
        """Whether the agent is connected to NATS (and so, as far as it can tell, to the hub)."""
        return self.link.connected()

    def _metrics_state(self) -> AgentState:
        return AgentState(
            node=self.config.name,
            cluster=self.config.cluster,
            counters=self.counters,
            function_counters=self.functions.counters,
            running=lambda: len(self.runner.running_ids()),
            instances=self.functions.snapshot,
            outbox_depth=lambda: len(self.outbox),
            hub_reachable=self.hub_reachable,
            power=self.power.read,
            reward=lambda: self.decider.reward_config,
        )

    def _install_policy(self, policy: Any, version: int | None) -> None:
        """A policy version from the hub (edge_agent/policy_updates.py) decides from now on."""
        self.decider.policy, self.decider.policy_version = policy, version

    def _advise_restart(self, entry: RunningPlacement) -> RestartChoice:
        return advise_restart(self.decider, self.counters, entry)

    def _on_state_change(self, state: PlacementState) -> None:
        self.reports.on_state_change(state)

    # --- lifecycle ------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        if self.config.unit_spawner:  # units started before it is up wait for it (resumed work)
            self.confinement.begin_spawner()
        if self.config.local_policy:
            # The version the hub last installed here, if it still loads; else the shipped model.
            policy, version = load_current(self.policy_updates.policy_dir, self.config.policy_model)
            self.policy, self.decider.policy_version = policy, version
            self.policy_updates.version = version
        # Work a previous run of this agent left (it died, and its processes with it) is resumed
        # once the hub says it still wants it here, or without the hub within the autonomy window:
        # decided beside the connection, so that the node keeps serving whether or not a hub answers.
        # Before anything runs (resumed work included), hub or no hub.
        self._load_task = asyncio.create_task(self.load.loop(), name="load-sampler")
        # Exits the previous run never handled (killed between a unit's end and its report) are
        # final states in the outbox before anything is resumed or registered: not run again.
        self.runner.recover_exits(
            reported={s.placement_id for s in self.outbox.latest_states() if s.state in FINAL_STATES}
        )
        undecided = self.runner.resumable()
        self.confinement.prune(keep={s.placement_id for s in undecided})  # work dirs of work not resumed
        if undecided:
            self._resume_task = asyncio.create_task(self.registration.resume(undecided), name="resume")
        if self.metrics is not None:  # before NATS: a node cut off from the hub is still scraped
            await self.metrics.start()
        try:
            nc = await self.link.connect(self._stop, self._on_reconnected)
        except BaseException:  # stopped before NATS ever answered: nothing else was started
            await stop_task(self._load_task)
            if self.metrics is not None:
                await self.metrics.stop()
            raise
        name = self.config.name
        await nc.subscribe(self.subjects.command(name), cb=self.commands.on_command)
        await nc.subscribe(self.subjects.hub_hello(), cb=self._on_hello)
        await nc.subscribe(self.subjects.invoke(name), cb=self.invocations.on_invoke)
        await nc.subscribe(self.subjects.prewarm(name), cb=self.invocations.on_prewarm)
        await nc.subscribe(self.subjects.invocation_query(name), cb=self.invocations.on_invocation_query)
        await nc.subscribe(self.subjects.logs(name), cb=self.logs.on_request)
        await nc.subscribe(self.subjects.retire(name), cb=self.invocations.on_retire)
        await nc.subscribe(self.subjects.bid(name), cb=self.bids.on_bid)
        await nc.subscribe(self.subjects.node(name, "decisions"), cb=self.bids.on_decisions)
        await nc.subscribe(self.subjects.policy(name), cb=self.policy_updates.on_policy)
        await nc.flush(timeout=5)
        self.registration.trigger()
        self._tasks = [
            asyncio.create_task(self.heartbeats.loop(), name="heartbeat"),
            asyncio.create_task(self.reports.loop(), name="outbox"),
            asyncio.create_task(self.offline.loop(), name="evict"),
            asyncio.create_task(self.logs.loop(), name="logs"),
        ]
        log.info("agent %s/%s up (boot %s)", self.config.cluster, self.config.name, self.boot_id[:8])
        try:
            await self._stop.wait()
        finally:
            await self._shutdown()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in a task the shutdown stops (an invocation, a placement's stop)."""
        task = asyncio.create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        return task

    async def _shutdown(self) -> None:
        for task in [*self._tasks, self.registration.task, self._resume_task]:
            await stop_task(task)
        await self.runner.shut_down()
        # Their final states (Failed, NodeShutdown) reach the hub now, while the link is up, so that
        # it applies the restart policy at once rather than lose the node's work at lease expiry.
        await self.reports.flush(SHUTDOWN_FLUSH_S)
        await stop_task(self._load_task)  # after the placements: their ends still read the load
        self.runner.cpu_limiter.close()
        await self.functions.close()
        await self.confinement.stop_spawner()
        self.confinement.shutdown()
        await self.link.close()
        close = getattr(self.gpus, "close", None)
        if close is not None:
            close()
        self.outbox.close()
        if self.runner.exit_records is not None:
            self.runner.exit_records.close()
        self.invocations.close()
        if self.metrics is not None:
            await self.metrics.stop()

    async def _on_reconnected(self) -> None:
        self.counters["reconnects"] += 1
        self.registration.trigger()
        self.reports.wake.set()

    async def _on_hello(self, msg: Msg) -> None:
        try:
            hello = decode(msg.data, HubHelloV1)
        except MessageError as exc:
            self.link.malformed("hub_hello", exc)
            return
        log.info("hub %s says hello; registering again", hello.hub_id)
        self.link.heard_hub()
        self.registration.trigger()
