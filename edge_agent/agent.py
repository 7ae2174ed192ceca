"""The edge agent: registers with the hub, heartbeats telemetry, runs placed work, reports back.

It survives NATS or hub outages: running work keeps running, state reports wait in a bounded
outbox (and the full state is re-sent on every (re-)registration), and the connection comes back
through nats-py's reconnect loop after a first connect retried with backoff (tenacity).

Without the hub it keeps deciding for the work it already has, with the same local policy that
answers the hub's bids (:meth:`Agent.local_decision`): how to restart a placement whose process
exited (``restart_policy``; :mod:`edge_agent.restarts`), and, while NATS is down, whether each
idle warm function instance stays warm.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from edgeplane_contract.aio import stop_task, wait_set
from edgeplane_contract.messages import (
    BidRequestV1,
    BidV1,
    CommandAckV1,
    CommandV1,
    HeartbeatV1,
    HubHelloV1,
    InvocationQueryV1,
    InvocationStatusV1,
    InvokeResultV1,
    InvokeV1,
    MessageError,
    NodeResources,
    OfferSpec,
    PlacementState,
    PrewarmAckV1,
    PrewarmV1,
    RegisterAckV1,
    RegisterV1,
    ReportAckV1,
    StatusReportV1,
    Subjects,
    Telemetry,
    decode,
    encode,
)
from edgeplane_contract.transport import DEFAULT_MAX_PAYLOAD, PAYLOAD_MARGIN, connect_nats

from edge_agent import __version__
from edge_agent.cgroups import CpuLimiter, NoCpuLimit, detect_cpu_limiter
from edge_agent.config import AgentConfig
from edge_agent.confinement import Confinement
from edge_agent.decisions import DecisionLog, LoggedDecision
from edge_agent.executor import ProcessRunner, RunningPlacement
from edge_agent.functions.pool import FunctionPool, Instance
from edge_agent.invocation_record import FinishedInvocations
from edge_agent.outbox import DurableOutbox
from edge_agent.restarts import Backoff, RestartChoice, as_requested, choice_from_decision, offer_for_restart
from edge_agent.telemetry import (
    GpuReader,
    NvmlGpuReader,
    PowerReader,
    PsutilSystemReader,
    SysfsPowerReader,
    SystemReader,
)
from edge_agent.telemetry.power import PowerState
from edge_agent.weights import current_weights

__all__ = ["Agent"]

log = logging.getLogger("edgeplane.agent")

# When the hub last answered (wall-clock seconds): a restarted agent's autonomy window counts from it.
HUB_CONTACT_FILE = "hub_contact"
OUTBOX_FILE = "outbox.sqlite3"
INVOCATIONS_FILE = "invocations.sqlite3"
# The record of finished invocations a restarted hub may ask for: at most this many, this large.
INVOCATIONS_KEPT = 2000
INVOCATION_BYTES_KEPT = 64 * 2**20


@dataclass(frozen=True, slots=True)
class LocalOutcome:
    """One local-policy decision with the inputs it was made under."""

    decision: Any  # edgeplane_contract.policy.runtime.Decision (imported lazily: onnxruntime is optional)
    weights: tuple[float, float, float, float]
    power: PowerState


def _function_offer(instance: Instance) -> OfferSpec:
    """An idle function instance as an offer: the function's own resources."""
    return OfferSpec(cpu=instance.code.cpu, memory=instance.code.memory, kind="function")


class _RegisterRejected(Exception):
    pass


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
        self.reward_config = config.reward
        self.policy: Any = None  # LocalPolicy, loaded in run() (it logs its fallback warning once)
        self.decisions = DecisionLog(limit=config.decision_log_limit, epsilon=config.privacy_epsilon)
        cpu_limiter: CpuLimiter = NoCpuLimit()
        if config.cpu_limits:
            cpu_limiter = detect_cpu_limiter(config.name, cgroup_root=config.cgroup_root)
        # What user code runs confined by, worked out once; the hub learns it at registration.
        self.confinement = Confinement.detect(
            node=config.name,
            work_dir=Path(config.work_dir),
            run_as=config.run_as,
            pids_max=config.pids_max,
            cgroup_root=config.cgroup_root,
            cpu_quota=cpu_limiter.name,
        )
        self.runner = ProcessRunner(
            work_dir=Path(config.work_dir),
            on_change=self._on_state_change,
            stop_grace_s=config.stop_grace_s,
            restart_advisor=self._advise_restart,
            backoff=Backoff(config.restart_backoff_s, config.restart_backoff_max_s),
            state_file=Path(config.work_dir) / "placements.json",
            cpu_limiter=cpu_limiter,
            confinement=self.confinement,
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
        self.hub_id = ""
        # The hub's answer to the first registration after a restart: which placements to resume.
        self._confirmed = asyncio.Event()
        self._hub_keep: list[str] | None = None
        self._contact_file = Path(config.work_dir) / HUB_CONTACT_FILE
        self._contact_written = 0.0
        self._resume_task: asyncio.Task[None] | None = None
        # Invocations running now, and a bounded record of finished ones with their results: what
        # a restarted hub asks for (fn.query) before it fails anything.
        self._invocations_running: set[str] = set()
        self._invocations_done = FinishedInvocations(
            Path(config.work_dir) / INVOCATIONS_FILE,
            max_count=INVOCATIONS_KEPT,
            max_bytes=INVOCATION_BYTES_KEPT,
        )
        self._acks: OrderedDict[str, CommandAckV1] = OrderedDict()
        self._nc: NATS | None = None
        self._stop = asyncio.Event()
        self._outbox_wake = asyncio.Event()
        self._register_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._seq = 0
        self._last_offline_pass = 0.0

    # --- lifecycle ------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        if self.config.local_policy:
            from edgeplane_contract.policy.runtime import LocalPolicy

            self.policy = LocalPolicy.load(self.config.policy_model)
        # Work a previous run of this agent left (it died, and its processes with it) is resumed
        # once the hub says it still wants it here, or without the hub within the autonomy window:
        # decided beside the connection, so that the node keeps serving whether or not a hub answers.
        undecided = self.runner.resumable()
        self.confinement.prune(keep={s.placement_id for s in undecided})  # work dirs of work not resumed
        if undecided:
            self._resume_task = asyncio.create_task(self._resume(undecided), name="resume")
        self._nc = await self._connect()
        nc = self._nc
        await nc.subscribe(self.subjects.command(self.config.name), cb=self._on_command)
        await nc.subscribe(self.subjects.hub_hello(), cb=self._on_hello)
        await nc.subscribe(self.subjects.invoke(self.config.name), cb=self._on_invoke)
        await nc.subscribe(self.subjects.prewarm(self.config.name), cb=self._on_prewarm)
        await nc.subscribe(self.subjects.invocation_query(self.config.name), cb=self._on_invocation_query)
        await nc.subscribe(self.subjects.bid(self.config.name), cb=self._on_bid)
        await nc.subscribe(self.subjects.node(self.config.name, "decisions"), cb=self._on_decisions)
        await nc.flush(timeout=5)
        self._trigger_register()
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(self._outbox_loop(), name="outbox"),
            asyncio.create_task(self._eviction_loop(), name="evict"),
        ]
        log.info("agent %s/%s up (boot %s)", self.config.cluster, self.config.name, self.boot_id[:8])
        try:
            await self._stop.wait()
        finally:
            await self._shutdown()

    async def _connect(self) -> NATS:
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=5.0), retry=retry_if_exception_type(Exception)
        ):
            with attempt:
                if self._stop.is_set():
                    raise asyncio.CancelledError
                return await connect_nats(
                    self.config.nats_url,
                    name=f"edge-agent-{self.config.name}",
                    connect_within_s=5.0,
                    on_reconnected=self._on_reconnected,
                    seed=self.config.nats_seed or None,
                    inbox_prefix=self.config.inbox_prefix or None,
                    tls=self.config.nats_tls.context() if self.config.nats_tls else None,
                )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _shutdown(self) -> None:
        for task in [*self._tasks, self._register_task, self._resume_task]:
            await stop_task(task)
        await self.runner.stop_all()
        self.runner.cpu_limiter.close()
        await self.functions.close()
        self.confinement.shutdown()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), timeout=2)
        close = getattr(self.gpus, "close", None)
        if close is not None:
            close()
        self.outbox.close()
        self._invocations_done.close()

    async def _resume(self, undecided: list[PlacementState]) -> None:
        """Resume what the hub confirms; without its word in time, all of it if the hub was heard
        within the autonomy window, else nothing (the hub has likely moved it: it would run twice)."""
        ids = {s.placement_id for s in undecided}
        if not await wait_set(self._confirmed, self.config.resume_confirm_s):
            heard = self._last_hub_contact()
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

    def _heard_hub(self) -> None:
        """Note that the hub answered (at most every few seconds on disk): the autonomy window of a
        later restart counts from here."""
        now = time.time()
        if now - self._contact_written < 5.0:
            return
        self._contact_written = now
        with contextlib.suppress(OSError):
            tmp = self._contact_file.with_name(self._contact_file.name + ".tmp")
            tmp.write_text(f"{now:.3f}\n", encoding="utf-8")
            os.replace(tmp, self._contact_file)

    def _last_hub_contact(self) -> float | None:
        try:
            return float(self._contact_file.read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            return None

    async def _on_reconnected(self) -> None:
        self.counters["reconnects"] += 1
        self._trigger_register()
        self._outbox_wake.set()

    async def _on_hello(self, msg: Msg) -> None:
        try:
            hello = decode(msg.data, HubHelloV1)
        except MessageError as exc:
            self._malformed("hub_hello", exc)
            return
        log.info("hub %s says hello; registering again", hello.hub_id)
        self._heard_hub()
        self._trigger_register()

    # --- registration ---------------------------------------------------------------------

    def _trigger_register(self) -> None:
        if self._register_task is not None and not self._register_task.done():
            self._register_task.cancel()
        self._register_task = asyncio.create_task(self._register_until_accepted(), name="register")

    def _register_message(self) -> RegisterV1:
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
            ),
            heartbeat_interval_s=self.config.heartbeat_interval_s,
            labels=self.config.labels,
            node_type=self.config.node_type,
            telemetry=self._telemetry(),
            placements=self._known_states(),
            isolation=dict(self.confinement.report),
        )

    def _known_states(self) -> list[PlacementState]:
        """What the registration tells the hub: the placements running, those waiting to be
        resumed (as running: the hub's answer says whether to), and final states still queued
        from before a restart (a workload that finished while the hub was away)."""
        states = [*self.runner.states(), *self.runner.resumable()]
        listed = {s.placement_id for s in states}
        states += [s for s in self.outbox.latest_states() if s.placement_id not in listed]
        return [dataclasses.replace(s) for s in states]

    async def _register_until_accepted(self) -> None:
        self.registered.clear()
        async for attempt in AsyncRetrying(
            wait=wait_exponential(multiplier=0.2, max=10.0),
            retry=retry_if_exception_type(Exception),
        ):
            with attempt:
                nc = self._nc
                if nc is None or not nc.is_connected:
                    raise ConnectionError("not connected")
                reply = await nc.request(
                    self.subjects.register(self.config.name), encode(self._register_message()), timeout=3
                )
                ack = decode(reply.data, RegisterAckV1)
                if not ack.accepted:
                    self.counters["register_refused"] += 1
                    log.error("hub refused registration: %s", ack.reason)
                    raise _RegisterRejected(ack.reason)
                self.hub_id = ack.hub_id
                self._hub_keep = ack.keep
        self._heard_hub()
        self._confirmed.set()
        self.counters["registrations"] += 1
        self.registered.set()
        self._outbox_wake.set()
        log.info("registered with hub %s", self.hub_id)

    # --- heartbeats -----------------------------------------------------------------------

    def _telemetry(self) -> Telemetry:
        sample = self.system.read()
        power = self.power.read()
        return Telemetry(
            cpu_percent=sample.cpu_percent,
            memory_used_bytes=sample.memory_used_bytes,
            memory_total_bytes=sample.memory_total_bytes,
            load_1m=sample.load_1m,
            power_source=power.source,
            battery_percent=power.battery_percent,
            gpus=self.gpus.read(),
            weights=list(current_weights(self.reward_config, power)),
            policy=self.policy.source if self.policy is not None else "",
        )

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_s
        while True:
            nc = self._nc
            if nc is not None and nc.is_connected and self.registered.is_set():
                self._seq += 1
                heartbeat = HeartbeatV1(
                    node=self.config.name,
                    boot_id=self.boot_id,
                    seq=self._seq,
                    sent_at=time.time(),
                    telemetry=self._telemetry(),
                    running=self.runner.running_ids(),
                    instances=self.functions.snapshot(),
                )
                try:
                    await nc.publish(self.subjects.heartbeat(self.config.name), encode(heartbeat))
                    self.counters["heartbeats"] += 1
                except Exception as exc:
                    log.debug("heartbeat not sent: %s", exc)
            await asyncio.sleep(interval)

    # --- commands -------------------------------------------------------------------------

    def _malformed(self, kind: str, exc: Exception) -> None:
        self.counters["malformed_messages"] += 1
        log.warning("dropped malformed %s: %s", kind, exc)

    async def _on_command(self, msg: Msg) -> None:
        try:
            command = decode(msg.data, CommandV1)
            if command.kind not in ("run", "stop"):
                raise MessageError("command", f"unknown kind {command.kind!r}", field="kind")
            if command.kind == "run" and (command.spec is None or not command.spec.command):
                raise MessageError("command", "run needs a spec with a command", field="spec")
        except MessageError as exc:
            self._malformed("command", exc)
            if msg.reply:
                await self._reply(msg, CommandAckV1(command_id="", accepted=False, reason=str(exc)))
            return
        self.counters["commands"] += 1
        self._heard_hub()
        previous = self._acks.get(command.command_id)
        if previous is not None:
            self.counters["duplicate_commands"] += 1
            await self._reply(msg, dataclasses.replace(previous, duplicate=True))
            return
        try:
            ack = await self._execute(command)
        except Exception as exc:  # never leave a command unanswered, never crash the subscription
            log.exception("command %s failed", command.command_id)
            ack = CommandAckV1(command_id=command.command_id, accepted=False, reason=f"agent error: {exc}")
        self._acks[command.command_id] = ack
        while len(self._acks) > 10_000:
            self._acks.popitem(last=False)
        await self._reply(msg, ack)

    async def _execute(self, command: CommandV1) -> CommandAckV1:
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
        task = asyncio.create_task(self.runner.stop(command.placement_id))
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        return CommandAckV1(command_id=command.command_id, accepted=True)

    async def _reply(self, msg: Msg, ack: CommandAckV1 | InvocationStatusV1) -> None:
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(encode(ack))

    # --- functions ------------------------------------------------------------------------

    async def _on_invoke(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, InvokeV1)
        except MessageError as exc:
            self._malformed("invoke", exc)
            if msg.reply:
                error = {"type": "BadRequest", "message": str(exc), "code": "bad_message"}
                with contextlib.suppress(Exception):
                    await msg.respond(encode(InvokeResultV1(invocation_id="", ok=False, error=error)))
            return
        # Each invocation runs in its own task so that one slow function never blocks the others.
        task = asyncio.create_task(self._invoke_and_reply(msg, request))
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _invoke_and_reply(self, msg: Msg, request: InvokeV1) -> None:
        self.counters["invocations"] += 1
        self._invocations_running.add(request.invocation_id)
        try:
            result = await self.functions.invoke(request)
        except Exception as exc:
            log.exception("invocation %s failed in the agent", request.invocation_id)
            error = {"type": type(exc).__name__, "message": str(exc), "code": "agent_error"}
            result = InvokeResultV1(invocation_id=request.invocation_id, ok=False, error=error)
        finally:
            self._invocations_running.discard(request.invocation_id)
        payload = encode(result)
        limit = self._max_payload()
        if len(payload) > limit:
            # The reply cannot cross the bus: say so, instead of leaving the caller to time out.
            error = {
                "type": "ResultTooLarge",
                "code": "result_too_large",
                "message": f"the result is {len(payload)} bytes encoded; one NATS message carries {limit}",
            }
            result = dataclasses.replace(result, ok=False, result=None, error=error)
            payload = encode(result)
        self._remember_invocation(result, payload)
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(payload)

    def _max_payload(self) -> int:
        """The largest message the connection carries (what the server announced, else its default)."""
        nc = self._nc
        return nc.max_payload if nc is not None and nc.max_payload > 0 else DEFAULT_MAX_PAYLOAD

    def _remember_invocation(self, result: InvokeResultV1, payload: bytes) -> None:
        """Keep the result for a hub that asks later (on disk: it outlives this process)."""
        self._invocations_done.add(result, payload)

    async def _on_invocation_query(self, msg: Msg) -> None:
        try:
            query = decode(msg.data, InvocationQueryV1)
        except MessageError as exc:
            self._malformed("invocation_query", exc)
            return
        self._heard_hub()
        reply = InvocationStatusV1(query_id=query.query_id)
        limit = self._max_payload() - PAYLOAD_MARGIN
        size = len(encode(reply)) + 64 * len(query.invocation_ids)
        for invocation_id in query.invocation_ids[:1000]:
            if invocation_id in self._invocations_running:
                reply.running.append(invocation_id)
                continue
            done = self._invocations_done.get(invocation_id)
            if done is None:
                continue
            result, result_size = done
            if size + result_size > limit:
                reply.deferred.append(invocation_id)
            else:
                reply.finished.append(result)
                size += result_size
        await self._reply(msg, reply)

    async def _on_prewarm(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, PrewarmV1)
        except MessageError as exc:
            self._malformed("prewarm", exc)
            return
        try:
            started = await self.functions.prewarm(request)
            ack = PrewarmAckV1(request_id=request.request_id, started=started)
        except Exception as exc:
            log.exception("prewarm of %s failed", request.code.name)
            ack = PrewarmAckV1(request_id=request.request_id, started=0, reason=str(exc))
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(encode(ack))

    async def _eviction_loop(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            try:
                await self.functions.evict_expired()
                if not self.hub_reachable():
                    await self._offline_scale_pass()
            except Exception:
                log.exception("eviction pass failed")

    def hub_reachable(self) -> bool:
        """Whether the agent is connected to NATS (and so, as far as it can tell, to the hub)."""
        nc = self._nc
        return nc is not None and nc.is_connected

    async def _offline_scale_pass(self) -> int:
        """Without NATS, keep each idle function instance warm only if the local policy would run it.

        Connected, the hub's keep-alive policy decides (keep-alive and pre-warm messages); cut off,
        the agent asks its local policy, every ``offline_scale_interval_s``, about an offer equal to
        each idle instance's resources: a bin keeps it, a decline (e.g. a low battery raising w3)
        stops it. Without a loaded model, nothing changes (the keep-alive still applies).
        Returns how many instances were stopped.
        """
        now = time.monotonic()
        if now - self._last_offline_pass < self.config.offline_scale_interval_s:
            return 0
        self._last_offline_pass = now
        if self.policy is None or not self.policy.uses_model:
            return 0
        stopped = 0
        for instance in self.functions.idle_instances():
            if instance.state != "idle":  # became busy while an earlier instance was being stopped
                continue
            outcome = self.local_decision(
                purpose="keep-warm",
                request_id=f"keep-warm:{instance.instance_id}:{uuid.uuid4().hex[:8]}",
                workload_id=f"fn:{instance.code.name}",
                offer=_function_offer(instance),
                released_memory=instance.code.memory,
            )
            if outcome is not None and outcome.decision.decline:
                self.counters["offline_scale_downs"] += 1  # before the stop, which waits for the exit
                await self.functions.stop_instance(
                    instance, "scaled down by the local policy while the hub is unreachable"
                )
                stopped += 1
        return stopped

    # --- local policy -----------------------------------------------------------------------

    def node_view(
        self,
        power_source: str,
        battery_percent: float | None,
        *,
        exclude: str | None = None,
        released_memory: int = 0,
    ) -> Any:
        """What the local policy sees of this node now.

        ``exclude`` leaves one placement out of the allocation (the one being restarted: its
        resources are free while it is down); ``released_memory`` is memory about to be freed
        (an idle function instance whose keep-warm is being decided).
        """
        from edgeplane_contract.policy.features import NodeView
        from edgeplane_contract.power import DEFAULT_POWER_SPECS

        sample = self.system.read()
        running = [
            p for pid, p in self.runner.placements.items() if p.state.state == "Running" and pid != exclude
        ]
        gpus = self.gpus.read()
        used_gpus = {i for p in running for i in p.spec.gpu_indices}
        spec = DEFAULT_POWER_SPECS.get(self.config.node_type, DEFAULT_POWER_SPECS["edge"])
        memory_allocated = sum(p.memory for p in running) + self.functions.memory_in_use() - released_memory
        return NodeView(
            node_type=self.config.node_type,
            cpu_capacity=float(self.config.cpu or sample.cpu_count),
            cpu_allocated=sum(p.cpu for p in running),
            memory_capacity=float(self.config.memory or sample.memory_total_bytes),
            memory_allocated=float(max(0, memory_allocated)),
            gpu_count=len(gpus),
            gpus_free=sum(1 for g in gpus if g.index not in used_gpus and not g.mig_enabled),
            replicas=len(running),
            on_battery=power_source == "battery",
            battery_percent=battery_percent,
            idle_w=spec.idle_w,
            max_w=spec.max_w,
        )

    def local_decision(
        self,
        *,
        purpose: str,
        request_id: str,
        workload_id: str,
        offer: OfferSpec,
        replica: int = -1,
        exclude: str | None = None,
        released_memory: int = 0,
    ) -> LocalOutcome | None:
        """Ask the local policy about ``offer`` under the node's live weights; log the decision.

        One code path for every local decision (bids, restarts, keep-warm): the node view, the
        offer translated to the policy's terms, the weights from the current power state
        (w3 rises on battery). Returns the decision with its weights and power state, or None
        when no policy is loaded or it raised (counted in ``policy_errors``).
        """
        if self.policy is None:
            return None
        from edgeplane_contract.policy.features import Offer

        power = self.power.read()
        weights = current_weights(self.reward_config, power)
        node = self.node_view(
            power.source, power.battery_percent, exclude=exclude, released_memory=released_memory
        )
        local_offer = Offer.from_request(
            kind=offer.kind,
            cpu=offer.cpu,
            memory=offer.memory,
            gpu=offer.gpu,
            mig=offer.mig,
            sla_s=offer.sla_s,
            runtime_s=offer.runtime_s,
            priority=offer.priority,
        )
        try:
            decision = self.policy.decide(node, local_offer, weights)
        except Exception:  # a policy bug must not take the agent down; the caller falls back
            log.exception("local policy failed on %s %s", purpose, request_id)
            self.counters["policy_errors"] += 1
            return None
        self.decisions.add(
            LoggedDecision(
                t=time.time(),
                request_id=request_id,
                workload_id=workload_id,
                replica=replica,
                state={
                    "cpu_free": node.cpu_capacity - node.cpu_allocated,
                    "memory_free": node.memory_capacity - node.memory_allocated,
                    "on_battery": node.on_battery,
                    "battery_percent": node.battery_percent,
                },
                offer=dataclasses.asdict(offer),
                weights=list(weights),
                action=decision.action,
                decline=decision.decline,
                expected_reward=decision.score,
                source=decision.source,
                purpose=purpose,
            )
        )
        return LocalOutcome(decision, weights, power)

    async def _on_bid(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, BidRequestV1)
        except MessageError as exc:
            self._malformed("bid", exc)
            return
        if self.policy is None:
            return  # no local policy: let the hub's deadline pass and use its own scores
        outcome = self.local_decision(
            purpose="bid",
            request_id=request.request_id,
            workload_id=request.workload_id,
            replica=request.replica,
            offer=request.offer,
        )
        if outcome is None:  # the policy raised: no answer, the hub falls back to its estimate
            return
        decision = outcome.decision
        bid = BidV1(
            request_id=request.request_id,
            node=self.config.name,
            accept=not decision.decline,
            action=decision.action,
            cpu=decision.cpu,
            memory=int(decision.memory),
            gpu_units=decision.gpu_units,
            accelerator=decision.accelerator,
            score=decision.score,
            weights=list(outcome.weights),
            source=decision.source,
            masked=decision.masked,
            latency_us=decision.latency_us,
            score_requested=decision.requested_score,
        )
        self.counters["bids"] += 1
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(encode(bid))

    def _advise_restart(self, entry: RunningPlacement) -> RestartChoice:
        """How to restart a placement whose back-off is over (the runner asks; hub or no hub).

        With the model loaded, the local policy decides on the replica's offer, this placement's
        own resources counted as free; without it (local_policy off, or the heuristic fallback)
        the process restarts with the requested resources.
        """
        state = entry.state
        if self.policy is None or not self.policy.uses_model:
            return as_requested(entry.spec)
        outcome = self.local_decision(
            purpose="restart",
            request_id=f"restart:{state.placement_id}:{state.restarts + 1}",
            workload_id=state.workload_id,
            offer=offer_for_restart(entry.spec),
            exclude=state.placement_id,
        )
        if outcome is None:
            return as_requested(entry.spec)
        decision, power = outcome.decision, outcome.power
        self.counters["restart_declines" if decision.decline else "policy_restarts"] += 1
        where = f"on {power.source}"
        if power.source == "battery" and power.battery_percent is not None:
            where += f" at {power.battery_percent:g}%"
        weights = ", ".join(f"{w:g}" for w in outcome.weights)
        context = f"{decision.source}, {where}, weights {weights}, score {decision.score:.2f}"
        return choice_from_decision(decision, entry.spec, context)

    async def _on_decisions(self, msg: Msg) -> None:
        """The hub collects the decision log for retraining (rewards Laplace-noised)."""
        if msg.reply:
            payload = {"v": 1, "node": self.config.name, "epsilon": self.decisions.epsilon}
            payload["entries"] = self.decisions.export()
            with contextlib.suppress(Exception):
                await msg.respond(json.dumps(payload).encode())

    # --- state reports --------------------------------------------------------------------

    def _on_state_change(self, state: PlacementState) -> None:
        report = StatusReportV1(
            report_id=uuid.uuid4().hex, node=self.config.name, placement=dataclasses.replace(state)
        )
        if len(self.outbox) >= self.config.outbox_limit:
            # The newest state of every placement is re-sent at registration, so dropping the
            # oldest queued report loses no final state.
            self.outbox.popleft()
            self.counters["reports_dropped"] += 1
        self.outbox.append(report)
        self._outbox_wake.set()

    async def _outbox_loop(self) -> None:
        backoff = 0.2
        while True:
            await self._outbox_wake.wait()
            self._outbox_wake.clear()
            while self.outbox:
                nc = self._nc
                if nc is None or not nc.is_connected or not self.registered.is_set():
                    break
                report = self.outbox[0]
                try:
                    reply = await nc.request(
                        self.subjects.report(self.config.name), encode(report), timeout=2
                    )
                    ack = decode(reply.data, ReportAckV1)
                except Exception as exc:
                    log.debug("report %s not acknowledged yet: %s", report.report_id, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.2
                if ack.report_id == report.report_id and self.outbox and self.outbox[0] is report:
                    self.outbox.popleft()
                    self.counters["reports_sent"] += 1
            if self.outbox:
                # Not connected or not registered: look again soon.
                await asyncio.sleep(0.5)
                self._outbox_wake.set()
