"""The hub: node registry and leases, the workload lifecycle, and the reconcile loop.

State lives in the store; the hub keeps an in-memory view (node liveness, placement accounting)
that it rebuilds on start from the store and from the agents' re-registrations.

Lifecycle of a workload: Pending -> Scheduled -> Running -> Succeeded | Failed, or Cancelling ->
Cancelled after a DELETE. Each replica runs as a *placement* (one attempt on one node). A node that
misses its lease goes NotReady; its active placements become Lost and the replicas are placed again.

About 400 lines: the coordinator of the rooms (registry, leases, lifecycle, placing, dispatch);
each handler is a few lines handing the message to them under the hub's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.aio import stop_task, wait_set
from edgeplane_contract.messages import (
    HeartbeatV1,
    PlacementState,
    RegisterAckV1,
    RegisterV1,
    StatusReportV1,
)
from edgeplane_contract.transport import PAYLOAD_MARGIN

from controlplane.bus.hub_bus import HubBus
from controlplane.errors import NotFoundError, StoreUnavailableError, ValidationError
from controlplane.fleet.energy import EnergyMeter
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.descheduler import Descheduler
from controlplane.hub.dispatch import AckEffect, Dispatcher, Sent
from controlplane.hub.forget import ForgottenNode, commit_forget, forget_node
from controlplane.hub.learning import InterferenceLearning
from controlplane.hub.leases import (
    STALL_SHARE,
    HearingSince,
    IntakeLag,
    hearing_after,
    hold_for,
    hold_over,
    partitions,
    scan_leases,
    stall_matters,
)
from controlplane.hub.placement import Placer
from controlplane.hub.placing import PlacementRound
from controlplane.hub.registry import NodeRegistry, placement_node
from controlplane.hub.settings import HubSettings, SeenIds
from controlplane.hub.spec_cache import SpecCache
from controlplane.hub.stall import LoopWatch
from controlplane.hub.workloads import PlacementBook
from controlplane.observe.hub import HubMetrics
from controlplane.rollout.canary import latency_vs_sla
from controlplane.scheduling.model import Feasibility, WorkloadRequest
from controlplane.specs.workload import WorkloadSpec
from controlplane.store import queries
from controlplane.store.identities import IdentityStore
from controlplane.store.models import NodeRow, PlacementRow, WorkloadRow
from controlplane.store.store import ACTIVE_PLACEMENT, Store

if TYPE_CHECKING:  # the composition root builds it; the hub only calls it
    from controlplane.serverless.service import FunctionService

__all__ = ["Hub", "HubSettings"]

log = logging.getLogger("edgeplane.hub")


# How long stop() lets a reconcile round finish before it cancels the loop.
STOP_GRACE_S = 10.0
# Up to this many nodes every round passes over all of them (cheap, and it sees any change of a
# node's last word); beyond, the lease clock looks only at those whose earliest expiry came.
FULL_LEASE_SCAN_UP_TO = 256
# How long a round may wait for the hub to read the heartbeats waiting in its subscriptions before
# it declares nodes silent (a loaded hub's backlog is not the nodes' silence).
CATCH_UP_S = 1.0
# Registrations written in one transaction at most (a storm is admitted in batches of this size).
ADMIT_BATCH = 200
# Workloads created in one transaction at most (POSTs waiting together are written together).
CREATE_BATCH = 256

# A workload waiting to be stored: its spec, its idempotency key, the caller's answer (id, created).
# The answer: the workload's id and, when this POST created it, its row as stored (None: an
# earlier POST with the same idempotency key did).
_Created = tuple[str, WorkloadRow | None]
_Creation = tuple[WorkloadSpec, str | None, asyncio.Future[_Created]]


def new_id() -> str:
    return uuid.uuid4().hex


class Hub:
    """The central control plane's core. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        settings: HubSettings,
        store: Store,
        *,
        bus: HubBus,
        placer: Placer,
        functions: Callable[[Hub], FunctionService],
        metrics: HubMetrics | None = None,
    ) -> None:
        """The parts come from the composition root (``runtime.runner.build_hub``); ``functions``
        builds the function service, which takes this hub as its ``FunctionHost``; ``metrics``
        is the registry the placer and the function service already report to."""
        self.settings = settings
        # The store's hub lease, asked before every reconcile round (coordination.hub_lease):
        # a hub that lost it acts on nothing. None: no lease (tests, embedded use).
        self.fence: Callable[[], Awaitable[bool]] | None = None
        self.metrics = metrics or HubMetrics()
        self.store = store
        self.federation = settings.federation
        self.placer = placer
        self.bus = bus
        self.identities = IdentityStore(store)
        self.registry = NodeRegistry(
            self.federation,
            bus,
            self.identities,
            lease_missed_heartbeats=settings.lease_missed_heartbeats,
            limits=settings.registration,
            require_enrolment=settings.require_enrolment,
        )
        self.nodes = self.registry.nodes  # what the API, the bid round and the functions read
        self.specs = SpecCache()  # parsed once per workload (a spec never changes)
        self.dispatch = Dispatcher(
            bus, self.nodes, resend_after_s=settings.command_timeout_s, store=store, specs=self.specs
        )
        self._active: dict[str, tuple[str, int, str]] = {}  # placement id -> (workload, replica, node)
        # Runtime observations of successes -> the scheduler's interference estimate.
        self.learning = InterferenceLearning(
            placer, keep=settings.runtime_observations_kept, specs=self.specs
        )
        self.book = PlacementBook(
            placer,
            self._active,
            wake=self.wake,
            learning=self.learning,
            specs=self.specs,
            on_end=self._placement_ended,
        )
        self.placing = PlacementRound(
            store,
            placer,
            self.registry,
            self.book,
            self._active,
            bid_deadline_ms=settings.bid_deadline_ms,
            metrics=self.metrics,
            specs=self.specs,
            bid_shield_margin=settings.bid_shield_margin,
        )
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._seen_reports = SeenIds()
        self._last_hello = 0.0
        self._deaf: set[str] = set()  # clusters whose NATS connection is down (leases held)
        self._partitions: set[str] = set()  # clusters in a partition (their silent nodes' work held)
        self._held: set[str] = set()  # nodes whose work is held (NotReady within a hold), a superset
        # Registrations waiting for their batch's transaction, and whether a caller is writing them.
        self._admissions: list[tuple[str, RegisterV1, asyncio.Future[RegisterAckV1]]] = []
        self._admitting = False
        # Workloads POSTed and waiting for their batch's transaction, and the task writing them.
        self._creations: list[_Creation] = []
        self._creating: asyncio.Task[None] | None = None
        # The hub's own stalls (SIGSTOP, a paused VM): silence counts from when it woke at the
        # earliest, as from a reconnect (``hub.stall``).
        self.loop_watch = LoopWatch()
        self.intake_lag = IntakeLag()  # how late the heartbeats it handles are (lease slack)
        # Called with (node, mean regret) for each heartbeat that carries the regret of the local
        # policy's audited decisions (the canary controller, controlplane/policies/canary_live.py).
        self.policy_regret_listeners: list[Callable[[NodeLive, float], None]] = []
        # Called with (node, latency over SLA, workload id) for each placement with an SLA that
        # ends Succeeded or Failed (the canaries' outcome guards: controlplane/policies/).
        self.placement_outcome_listeners: list[Callable[[str, float, str], None]] = []
        # Told each heartbeat's power source and battery level (the canary's energy guard).
        self.power_listeners: list[Callable[[NodeLive, str, float | None], None]] = []
        # Each node's reported draw shared among its placements (energy per workload), and told
        # (node, mean watts per requested vCPU, workload id) of each placement that ends
        # Succeeded after a heartbeat counted it (the canary's energy-per-workload guard).
        self.energy = EnergyMeter()
        self.energy_listeners: list[Callable[[str, float, str], None]] = []
        # Nodes taking no new placements (the descheduler's cordon of an anomalous node).
        self.cordoned: set[str] = set()
        self.descheduler = Descheduler(self, settings.descheduler)
        self._deschedule_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._resumed_at = float("-inf")
        self.started = False
        self.functions = functions(self)
        self.metrics.watch(self)
        self.metrics.watch_interference(self.learning)

    # --- start / stop ---------------------------------------------------------------------

    async def start(self) -> None:
        await self._load_state()
        await self.functions.start()
        await self.bus.start(self, connect_within_s=self.settings.nats_connect_within_s)
        self._task = asyncio.create_task(self._run(), name="hub-reconcile")
        self._watch_task = asyncio.create_task(self.loop_watch.run(), name="hub-loop-watch")
        if self.settings.descheduler.enabled:
            self._deschedule_task = asyncio.create_task(self.descheduler.run(), name="hub-descheduler")
        self.started = True
        log.info("hub %s started", self.settings.hub_id)

    async def stop(self) -> None:
        # The loop ends between rounds; cancelling it inside a store transaction could leave
        # SQLite's write lock with a connection whose rollback was cut short. Cancelled only
        # when a round outlasts the grace.
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            _, running = await asyncio.wait({self._task}, timeout=STOP_GRACE_S)
            if running:
                log.warning("reconcile loop still running %.0fs after the stop: cancelled", STOP_GRACE_S)
            await stop_task(self._task)
        self._task = None
        if self._creating is not None:  # the POSTs already taken are written, not dropped
            await asyncio.wait({self._creating}, timeout=STOP_GRACE_S)
            await stop_task(self._creating)
        self._creating = None
        if self._watch_task is not None:
            await stop_task(self._watch_task)
        self._watch_task = None
        if self._deschedule_task is not None:
            await stop_task(self._deschedule_task)
        self._deschedule_task = None
        for task in self.dispatch.background():
            await stop_task(task)
        await self.functions.stop()
        await self.bus.close()
        async with self._lock:
            await self.registry.flush(self.store, force=True)
        self.started = False

    async def _load_state(self) -> None:
        async with self.store.session() as s:
            await self.learning.load(s)
            for node in await self.registry.load(s):
                self.placer.upsert_node(placement_node(node, self.federation))
            active = await queries.active_placements(s)
            specs: dict[str, WorkloadSpec] = {}
            for placement in active:
                if placement.workload_id not in specs:
                    workload = await s.get(WorkloadRow, placement.workload_id)
                    if workload is None:
                        continue
                    specs[placement.workload_id] = self.specs.of_row(workload.id, workload.spec)
                self.placer.reserve_existing(
                    placement.workload_id,
                    placement.replica,
                    placement.node,
                    specs[placement.workload_id],
                    placement.assignment,
                )
                self._active[placement.id] = (placement.workload_id, placement.replica, placement.node)
            Store.add_event(
                s, "HubStarted", "hub", self.settings.hub_id, f"recovered {len(self._active)} placements"
            )

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        store_away_since: float | None = None  # one line when the store goes, one when it is back
        while not self._stopping:
            try:
                await self.reconcile_once()
            except asyncio.CancelledError:
                raise
            except StoreUnavailableError as exc:
                if store_away_since is None:
                    store_away_since = time.monotonic()
                    log.warning("reconcile paused: %s; retried every round", exc)
            except Exception:
                log.exception("reconcile failed; retrying")
            else:
                if store_away_since is not None:
                    log.info(
                        "the store is back after %.1fs: reconcile resumed",
                        time.monotonic() - store_away_since,
                    )
                    store_away_since = None
            if self._stopping:
                break
            await wait_set(self._wake, self.settings.reconcile_interval_s)
            self._wake.clear()

    # --- agent messages -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _learning_transaction(self) -> AsyncIterator[AsyncSession]:
        """A store transaction that may end placements as Succeeded: the runtime observations it
        stored reach the estimator only once it has committed (under the hub's lock)."""
        try:
            async with self.store.session() as s:
                yield s
        except BaseException:
            self.learning.discard()
            raise
        self.learning.commit()

    def _refuse(self, node_name: str, reason: str) -> RegisterAckV1:
        self.bus.reject("register", node_name, reason)
        return RegisterAckV1(accepted=False, reason=reason, hub_id=self.settings.hub_id)

    async def handle_register(self, node_name: str, msg: RegisterV1) -> RegisterAckV1:
        """Admit or refuse a registration. Admissions waiting together are written in one
        transaction (a re-registration storm costs one commit per batch, not per node); each
        answer goes out once its batch has committed."""
        refusal = await self.registry.refusal(node_name, msg)
        if refusal is not None:
            return self._refuse(node_name, refusal)
        answer: asyncio.Future[RegisterAckV1] = asyncio.get_running_loop().create_future()
        self._admissions.append((node_name, msg, answer))
        if not self._admitting:  # this caller writes the batches until none is waiting
            self._admitting = True
            try:
                while self._admissions:
                    batch = self._admissions[:ADMIT_BATCH]
                    del self._admissions[:ADMIT_BATCH]
                    await self._admit_batch(batch)
            finally:
                self._admitting = False
                for *_, waiting in self._admissions:  # cancelled mid-way: the rest are not left hanging
                    if not waiting.done():
                        waiting.set_exception(RuntimeError("registration not admitted: the hub is stopping"))
                self._admissions.clear()
        return await answer

    async def _admit_batch(self, batch: list[tuple[str, RegisterV1, asyncio.Future[RegisterAckV1]]]) -> None:
        """One transaction for the batch; if it fails, each registration alone (one bad message
        must not keep the others out), and a failure of its own is that registration's answer."""
        try:
            acks = await self._admit(batch)
        except asyncio.CancelledError:
            for *_, answer in batch:
                if not answer.done():
                    answer.set_exception(RuntimeError("registration not admitted: the hub is stopping"))
            raise
        except Exception as exc:
            if len(batch) == 1:
                batch[0][2].set_exception(exc)
                return
            for one in batch:
                await self._admit_batch([one])
            return
        now = asyncio.get_running_loop().time()
        for (node_name, _, answer), ack in zip(batch, acks, strict=True):
            live = self.nodes.get(node_name)
            if ack.accepted and live is not None:
                # Its lease counts from the answer, not from its turn in the batch: the agent
                # heartbeats only once it has heard it was admitted.
                live.last_seen = max(live.last_seen, now)
                self.registry.leases.arm(live)
            if not answer.done():
                answer.set_result(ack)
        self.wake()

    async def _admit(
        self, batch: list[tuple[str, RegisterV1, asyncio.Future[RegisterAckV1]]]
    ) -> list[RegisterAckV1]:
        acks = []
        names = [node_name for node_name, _, _ in batch]
        async with self._lock, self._learning_transaction() as s:
            # Set-based reads for the whole batch (one query each, not three per registration).
            rows: dict[str, NodeRow | None] = dict(await queries.nodes_named(s, names))
            active = await queries.active_placements_of_nodes(s, names)
            ready_in: set[str] = set()  # clusters with a node admitted in this batch
            any_moved = False
            for node_name, msg, _ in batch:
                row = rows.get(node_name)
                taken = self.registry.name_taken(row, msg)
                if taken is not None:
                    acks.append(RegisterAckV1(accepted=False, reason=taken, hub_id=self.settings.hub_id))
                    continue
                moved = row is not None and row.cluster != msg.cluster
                row, previous_boot = self.registry.register(s, row, msg)
                rows[node_name] = row  # the same node twice in a batch: its row is new only once
                self.placer.upsert_node(placement_node(row, self.federation))
                if node_name in self.cordoned:  # registering again does not lift a cordon
                    self.placer.set_node_ready(node_name, False)
                if previous_boot != msg.boot_id:
                    self.functions.node_lost(node_name)
                ready_in.add(msg.cluster)
                any_moved = any_moved or moved
                placements = active.get(node_name, [])
                await self._reconcile_agent_placements(
                    s,
                    node_name,
                    msg.placements,
                    agent_restarted=previous_boot not in (None, msg.boot_id),
                    active=placements,
                )
                # What the agent keeps: its active placements the hub has not asked to stop (as
                # ``queries.kept_placement_ids`` reads them), after the merge just made.
                keep = [
                    p.id for p in placements if p.status in ACTIVE_PLACEMENT and p.stop_command_id is None
                ]
                acks.append(RegisterAckV1(accepted=True, hub_id=self.settings.hub_id, keep=keep))
            # The clusters' rows once per batch: a read per registration made each one flush the
            # batch's pending rows first (autoflush), and a pass over every node per registration
            # would make a storm quadratic.
            if any_moved:  # the cluster a node left may have no Ready node now
                await self.registry.refresh_clusters(s)
            else:
                for cluster in sorted(ready_in):
                    await self.registry.cluster_has_ready_node(s, cluster)
        return acks

    async def _reconcile_agent_placements(
        self,
        s: AsyncSession,
        node: str,
        reported: list[PlacementState],
        *,
        agent_restarted: bool,
        active: list[PlacementRow] | None = None,
    ) -> None:
        """Merge what an agent says it runs with what the store says it should run (``active``:
        the node's active placements, read for its batch; None: read here)."""
        by_id = {p.placement_id: p for p in reported}
        if active is None:
            active = await queries.active_placements(s, node=node)
        for placement in list(active):
            if placement.status not in ACTIVE_PLACEMENT:  # ended by an earlier registration in the batch
                continue
            state = by_id.pop(placement.id, None)
            if state is not None:
                await self.book.apply_report(s, placement, state)
            elif placement.acked or agent_restarted:
                await self.book.end(s, placement, "Lost", "agent no longer has this placement")
        for state in by_id.values():
            if state.state == "Running":
                self.dispatch.stop_orphan(node, state.placement_id, state.workload_id)

    async def handle_heartbeat(self, node_name: str, msg: HeartbeatV1) -> None:
        live = self.nodes.get(node_name)
        loop = asyncio.get_running_loop()
        if live is None or live.boot_id != msg.boot_id:
            # Unknown to this hub (store wiped, or heartbeat raced a restart): ask agents to register.
            if loop.time() - self._last_hello > 2.0:
                self._last_hello = loop.time()
                await self.bus.say_hello()
            return
        wall = time.time()
        self.metrics.heartbeat_lag.observe(max(0.0, wall - msg.sent_at))
        self.intake_lag.observe(wall - msg.sent_at)
        if self.registry.heard(live, msg, loop.time(), wall):
            self.placer.set_node_power(node_name, msg.telemetry.power_source, msg.telemetry.battery_percent)
        if msg.telemetry.power_w is not None:
            # On the agent's clock: the time between its own heartbeats, not their transit.
            self.energy.heard(
                node_name,
                msg.sent_at,
                msg.telemetry.power_w,
                msg.telemetry.power_method,
                self._cpu_held(node_name, msg),
            )
        else:
            self.energy.node_lost(node_name)  # no reading: no interval across it
        self.functions.update_instances(node_name, msg.instances)
        live.policy_version = msg.policy_version
        if msg.policy_regret is not None:
            for listener in self.policy_regret_listeners:
                listener(live, msg.policy_regret)
        for power_listener in self.power_listeners:
            power_listener(live, msg.telemetry.power_source, msg.telemetry.battery_percent)
        if live.status != "Ready":
            live.held = False  # back within the autonomy window: its held work simply goes on
            async with self._lock, self.store.session() as s:
                await self._set_node_status(s, live, "Ready", "heartbeats resumed")
            self.wake()
        for placement_id in msg.running:
            owner = self._active.get(placement_id)
            if owner is None or owner[2] != node_name:
                self.dispatch.stop_orphan(node_name, placement_id, owner[0] if owner else "")

    async def handle_report(self, node_name: str, msg: StatusReportV1) -> None:
        """Apply one agent's report (what :meth:`handle_reports` does for a batch); raises if the
        store did not take it."""
        if msg.report_id not in await self.handle_reports([(node_name, msg)]):
            raise RuntimeError(f"report {msg.report_id} of {node_name} was not applied")

    async def handle_reports(self, reports: Sequence[tuple[str, StatusReportV1]]) -> set[str]:
        """Apply agents' reports, in order, in one transaction; returns the ids of the reports
        settled (applied, already seen, or refused for good), the ones the bus acks. If the batch
        fails, each report is tried alone (one bad report must not keep the others out); a store
        that is away fails them all at once (their agents resend). Report ids are remembered only
        once their transaction has committed, so a failed batch is applied again when resent."""
        settled = {r.report_id for _, r in reports if r.report_id in self._seen_reports}
        fresh = [(node, r) for node, r in reports if r.report_id not in settled]
        if not fresh:
            return settled
        try:
            settled |= await self._apply_reports(fresh)
        except (asyncio.CancelledError, StoreUnavailableError):
            raise
        except Exception:
            if len(fresh) == 1:
                raise
            for one in fresh:
                try:
                    settled |= await self._apply_reports([one])
                except StoreUnavailableError:
                    raise
                except Exception:
                    log.exception("report %s of %s failed", one[1].report_id, one[0])
        return settled

    async def _apply_reports(self, reports: Sequence[tuple[str, StatusReportV1]]) -> set[str]:
        applied: set[str] = set()
        async with self._lock, self._learning_transaction() as s, self.book.refreshing_once(s):
            rows = await queries.placements_by_id(s, {r.placement.placement_id for _, r in reports})
            for node_name, msg in reports:
                if msg.report_id in applied:  # resent while the first copy waited in the batch
                    continue
                applied.add(msg.report_id)
                placement = rows.get(msg.placement.placement_id)
                if placement is None:
                    log.warning(
                        "report %s for unknown placement %s", msg.report_id, msg.placement.placement_id
                    )
                elif placement.node != node_name:
                    # A node speaking for another's placement: counted and dropped (defence in
                    # depth behind the NATS permissions, which keep a node to its own subject).
                    self.bus.reject(
                        "report", node_name, f"placement {placement.id} runs on {placement.node}, not here"
                    )
                else:
                    await self.book.apply_report(s, placement, msg.placement)
        for report_id in applied:  # only once committed: a failed batch is applied again
            self._seen_reports.add(report_id)
        self.wake()
        return applied

    # --- API operations -------------------------------------------------------------------

    async def create_workload(self, spec: WorkloadSpec, *, idempotency_key: str | None = None) -> _Created:
        """Store a new workload: its id and its row as stored; with an idempotency key a retried
        POST returns the first one's id and no row.

        The key is the caller-scoped one (``api/idempotency.py``): callers never share one."""
        spec.check_fits(self.bus.max_payload - PAYLOAD_MARGIN)
        if idempotency_key and not _storable(idempotency_key):
            raise ValidationError("must be valid UTF-8", field="Idempotency-Key")
        if idempotency_key:
            existing = await self.store.find_workload_by_key(idempotency_key)
            if existing is not None:
                return existing.id, None
        answer: asyncio.Future[_Created] = asyncio.get_running_loop().create_future()
        self._creations.append((spec, idempotency_key, answer))
        if self._creating is None or self._creating.done():
            # A task of its own, not the caller's: a caller that goes away does not stop the
            # writes of the others waiting in its batch.
            self._creating = asyncio.create_task(self._write_creations(), name="hub-create")
        return await answer

    async def _write_creations(self) -> None:
        """Write the waiting creations in batches of up to ``CREATE_BATCH``, one transaction each
        (group commit: a burst of POSTs costs one commit per batch). The hub's lock is not taken:
        a new Pending workload touches no state the lock guards; the next round finds it."""
        try:
            while self._creations:
                batch = self._creations[:CREATE_BATCH]
                del self._creations[:CREATE_BATCH]
                await self._create_batch(batch)
        finally:
            for *_, waiting in self._creations:  # cancelled mid-way (the hub stops): none left hanging
                if not waiting.done():
                    waiting.set_exception(StoreUnavailableError("the hub is stopping"))
            self._creations.clear()

    async def _create_batch(self, batch: list[_Creation]) -> None:
        """One transaction for the batch; if it fails, each creation alone (one bad row must not
        keep the others out), and a failure of its own is that creation's answer. A store that
        is away fails them all at once."""
        try:
            created = await self._insert_workloads(batch)
        except asyncio.CancelledError:
            for *_, answer in batch:
                if not answer.done():
                    answer.set_exception(StoreUnavailableError("the hub is stopping"))
            raise
        except Exception as exc:
            if len(batch) > 1 and not isinstance(exc, StoreUnavailableError):
                for one in batch:
                    await self._create_batch([one])
                return
            found = await self._same_key_winner(batch, exc)
            for *_, answer in batch:
                if not answer.done():
                    if found is not None:
                        answer.set_result((found, None))
                    else:
                        answer.set_exception(exc)
            return
        for (*_, answer), result in zip(batch, created, strict=True):
            if not answer.done():
                answer.set_result(result)
        self.wake()

    async def _same_key_winner(self, batch: list[_Creation], exc: Exception) -> str | None:
        """The workload a concurrent POST with the same idempotency key stored first, when that
        is why a lone creation failed (the unique key refused the second row)."""
        key = batch[0][1] if len(batch) == 1 else None
        if key is None or isinstance(exc, StoreUnavailableError):
            return None
        with contextlib.suppress(Exception):
            existing = await self.store.find_workload_by_key(key)
            if existing is not None:
                return existing.id
        return None

    async def _insert_workloads(self, batch: list[_Creation]) -> list[_Created]:
        """The batch's workloads (and their WorkloadCreated events) in one transaction; the same
        idempotency key twice in a batch is one workload."""
        results: list[_Created] = []
        by_key: dict[str, str] = {}
        now = time.time()
        async with self.store.session() as s:
            for spec, key, _ in batch:
                if key is not None and key in by_key:
                    results.append((by_key[key], None))
                    continue
                workload_id = new_id()
                if key is not None:
                    by_key[key] = workload_id
                row = WorkloadRow(
                    id=workload_id,
                    name=spec.name,
                    status="Pending",
                    message="",
                    spec=spec.to_dict(),
                    replicas=spec.replicas,
                    priority=spec.priority,
                    idempotency_key=key,
                    cancel_requested=False,
                    created_at=now,
                    updated_at=now,
                    finished_at=None,
                )
                s.add(row)
                Store.add_event(s, "WorkloadCreated", "workload", workload_id, spec.name)
                results.append((workload_id, row))
        for (spec, *_), (workload_id, created) in zip(batch, results, strict=True):
            if created is not None:  # committed: the placing round finds it parsed
                self.specs.put(workload_id, spec)
        return results

    async def cancel_workload(self, workload_id: str) -> None:
        """Request cancellation (idempotent): stops running replicas, never re-places them."""
        async with self._lock, self.store.session() as s:
            workload = await s.get(WorkloadRow, workload_id)
            if workload is None:
                raise NotFoundError(f"workload {workload_id!r} not found", field="id")
            if workload.cancel_requested or workload.status in ("Succeeded", "Failed", "Cancelled"):
                return
            workload.cancel_requested = True
            Store.add_event(s, "WorkloadCancelRequested", "workload", workload_id)
            active = await queries.active_placements(s, workload_id=workload_id)
            self.book.request_stops(active, "cancelled by user")
            await self.book.refresh_workload(s, workload_id)

    async def forget_node(self, name: str, *, force: bool = False) -> ForgottenNode:
        """Delete a node the hub should stop knowing (``hub.forget``): its active placements Lost
        and placed again, its credentials revoked, its row gone; 409 for a Ready one unless
        ``force``, 404 for an unknown name."""
        async with self._lock:
            async with self.store.session() as s:
                forgotten = await forget_node(self, s, name, force=force)
            commit_forget(self, forgotten)
        return forgotten

    def function_nodes(self, request: WorkloadRequest) -> Feasibility:
        """The nodes where one instance of a function fits now (the one placement engine)."""
        return self.placer.function_nodes(request)

    def allocated(self, node: str) -> dict[str, Any]:
        return self.placer.allocated(node)

    # --- the reconcile loop ---------------------------------------------------------------

    async def reconcile_once(self) -> None:
        if self.fence is not None and not await self.fence():
            return  # another hub holds the store now: the command stops this one
        async with self._lock:
            await self._expire_leases()
            fresh = self.dispatch.runs_of(await self.placing.place_pending())
            # The round's new placements are sent at once: a start does not wait for the rest of
            # the round (the registry's flush, the read of the other unacknowledged commands).
            sending = self.dispatch.start_sending(fresh)
            try:
                if sending:
                    for _ in range(2):  # each send task publishes, then the client's flusher writes
                        await asyncio.sleep(0)
                await self.registry.flush(self.store)
                async with self.store.session() as s:
                    due = await self.dispatch.due(s)
            except BaseException:
                for task in sending:  # unanswered: sent again after the ack timeout (deduped)
                    task.cancel()
                raise
        sent = await self.dispatch.send(due) if due else []
        if sending:
            sent = [*await self.dispatch.answers(fresh, sending), *sent]
        if sent:
            await self._apply_answers(sent)

    def _cpu_held(self, node: str, msg: HeartbeatV1) -> list[tuple[str, float]]:
        """(placement id, CPU request) of the placements a heartbeat lists that the hub has active there."""
        held = []
        for placement_id in msg.running:
            owner = self._active.get(placement_id)
            if owner is not None and owner[2] == node:
                spec = self.specs.get(owner[0])
                held.append((placement_id, spec.resources.cpu if spec is not None else 0.0))
        return held

    def _placement_ended(self, placement: PlacementRow) -> dict[str, Any] | None:
        """A placement ended. Its outcome against its workload's SLA, to whoever listens: its time
        from scheduling to its end over the SLA (capped), the cap for a failure; none without an
        SLA. Its energy, to the energy listeners (a success) and into its event (returned)."""
        used = self.energy.ended(placement.id)
        if used is not None and placement.status == "Succeeded":
            per_vcpu = used.watts_per_vcpu
            if per_vcpu is not None:
                for energy_listener in self.energy_listeners:
                    energy_listener(placement.node, per_vcpu, placement.workload_id)
        if self.placement_outcome_listeners and placement.status in ("Succeeded", "Failed"):
            spec = self.specs.get(placement.workload_id)
            sla = spec.sla_latency_s if spec is not None else None
            took = (placement.finished_at or time.time()) - placement.scheduled_at
            value = latency_vs_sla(took if placement.status == "Succeeded" else None, sla)
            if value is not None:
                for listener in self.placement_outcome_listeners:
                    listener(placement.node, value, placement.workload_id)
        if used is None:
            return None
        return {"energy_j": round(used.joules, 3), "energy_method": used.method}

    # --- the descheduler's view (hub/descheduler.py) ------------------------------------------

    def placements_on(self, node: str) -> list[tuple[str, str, int]]:
        return [(p, w, r) for p, (w, r, n) in self._active.items() if n == node]

    def is_active(self, placement_id: str) -> bool:
        return placement_id in self._active

    async def specs_of(self, workload_ids: list[str]) -> dict[str, WorkloadSpec]:
        async with self.store.session() as s:
            return await self.specs.load(s, workload_ids)

    def cores(self, node: str) -> float | None:
        cpu = self.placer.capacity(node).get("cpu")
        return float(cpu) if isinstance(cpu, int | float) else None

    def cordon(self, node: str, cordoned: bool) -> None:
        """No new placements on ``node`` (or again, once lifted, while it is Ready)."""
        if cordoned:
            self.cordoned.add(node)
        else:
            self.cordoned.discard(node)
        live = self.nodes.get(node)
        self.placer.set_node_ready(node, not cordoned and live is not None and live.status == "Ready")
        if not cordoned:
            self.wake()

    async def move_placement(self, placement_id: str, reason: str) -> bool:
        """Stop a placement so that its replica is placed again (elsewhere: its node is cordoned);
        an event ``Descheduled`` says why. False when it is no longer active or already stopping."""
        async with self._lock, self.store.session() as s:
            row = await s.get(PlacementRow, placement_id)
            if row is None or row.status not in ACTIVE_PLACEMENT or row.stop_command_id is not None:
                return False
            self.book.request_stops([row], reason)
            Store.add_event(
                s,
                "Descheduled",
                "workload",
                row.workload_id,
                f"replica {row.replica} moved off {row.node}: {reason}",
                {"placement_id": row.id, "node": row.node},
            )
        return True

    async def _set_node_status(self, s: AsyncSession, live: NodeLive, status: str, why: str) -> None:
        if status != "Ready":
            self.functions.node_lost(live.name)
            self.energy.node_lost(live.name)
        self.placer.set_node_ready(live.name, status == "Ready" and live.name not in self.cordoned)
        await self.registry.set_status(s, live, status, why)

    async def _expire_leases(self) -> None:
        """NotReady for nodes silent longer than their lease; their placements Lost, or held for
        a while (a partition, the eviction grace): the rules are in ``hub.leases``."""
        now = asyncio.get_running_loop().time()
        await self._heed_own_stall()
        hearing = hearing_after(self.bus.hearing_since, self._resumed_at)
        if len(self.nodes) > FULL_LEASE_SCAN_UP_TO and all(
            hearing(cluster) is not None for cluster in self.registry.clusters_seen
        ):
            # A fleet: only the nodes whose earliest expiry came are looked at.
            scan = self.registry.leases.due(self.nodes, now, hearing)
        else:  # a few nodes, or a deaf cluster (rare): the full pass, which also names it
            scan = scan_leases(self.nodes.values(), now, hearing)
        for cluster in sorted(scan.deaf - self._deaf):
            log.warning("NATS connection for cluster %s is down: node leases held until it is back", cluster)
        for cluster in sorted(self._deaf - scan.deaf):
            log.info("NATS connection for cluster %s is back: every node gets a full lease", cluster)
        self._deaf = scan.deaf
        if scan.expired:
            scan.expired = await self._still_silent(scan.expired, hearing)
            now = asyncio.get_running_loop().time()
        partitioned = self._note_partitions(scan.expired, now)
        self._hold_as_partitioned(partitioned)
        released = [n for n in self._held_nodes() if hold_over(n, now, hearing)]
        if not scan.expired and not released:
            return
        try:
            await self._apply_expiries(scan.expired, released, partitioned, now)
        except BaseException:
            # Expired nodes the write did not reach are still Ready: watched again, so that the
            # next round finds them (the full scan did so by itself).
            for live in scan.expired:
                if live.status == "Ready":
                    self.registry.leases.arm(live)
            raise

    async def _still_silent(self, expired: list[NodeLive], hearing: HearingSince) -> list[NodeLive]:
        """Of ``expired``, the nodes silent even allowing for the hub's own backlog: heartbeats
        waiting unread in its subscriptions are read first (at most ``CATCH_UP_S``), and the
        hub's intake lag (``leases.IntakeLag``: how late the heartbeats it handles are) is added
        to their leases; the others are watched again. A node is not declared silent for a
        heartbeat the hub has not read yet (the false NotReady of a loaded hub)."""
        deadline = time.monotonic() + CATCH_UP_S
        while time.monotonic() < deadline:  # bounded: CATCH_UP_S
            if not self.bus.unread_heartbeats():
                break
            await asyncio.sleep(0.001)  # the heartbeat handlers run meanwhile
        now = asyncio.get_running_loop().time()
        silent = scan_leases(expired, now, hearing, slack_s=self.intake_lag.seconds()).expired
        silent_names = {live.name for live in silent}
        for live in expired:
            if live.status == "Ready" and live.name not in silent_names:
                self.registry.leases.arm(live)  # heard after all, or maybe on the way: watched again
        return silent

    def _hold_as_partitioned(self, partitioned: set[str]) -> None:
        """Nodes of a cluster found partitioned now that went silent a little before the others
        (their leases expire a heartbeat apart, so the first are held by the eviction grace alone)
        are held as the partition's nodes are: for the autonomy window, not lost after the grace."""
        for live in self._held_nodes():
            if live.cluster not in partitioned:
                continue
            hold_s = hold_for(self.federation.cluster(live.cluster), partitioned=True)
            if hold_s is not None and hold_s > live.hold_s:
                live.hold_s = hold_s
                log.info(
                    "node %s: its work is held as its cluster %s's (a partition) until it is heard "
                    "again or the autonomy window ends",
                    live.name, live.cluster,
                )  # fmt: skip

    def _held_nodes(self) -> list[NodeLive]:
        """The nodes whose work is held now (a pass over the held ones, not the fleet)."""
        held = []
        for name in list(self._held):
            live = self.nodes.get(name)
            if live is None or not live.held:
                self._held.discard(name)
            else:
                held.append(live)
        return held

    async def _apply_expiries(
        self, expired: list[NodeLive], released: list[NodeLive], partitioned: set[str], now: float
    ) -> None:
        async with self.store.session() as s:
            if len(expired) > 1:  # their rows in one read: each status change then finds its own
                await queries.nodes_named(s, [live.name for live in expired])
            for live in expired:
                self.metrics.lease_expiries.labels(live.cluster).inc()
                silent = now - live.last_seen
                await self._set_node_status(s, live, "NotReady", f"no heartbeat for {silent:.1f}s")
                in_partition = live.cluster in partitioned
                hold_s = hold_for(self.federation.cluster(live.cluster), partitioned=in_partition)
                if hold_s is None:
                    await self.book.lose_node(
                        s, live.name, f"no heartbeat for {silent:.1f}s (lease {live.lease_s:.1f}s)"
                    )
                    continue
                live.held, live.hold_s = True, hold_s
                self._held.add(live.name)
                if in_partition:
                    log.info(
                        "node %s: no heartbeat for %.1fs: NotReady; its work is held (partition in "
                        "cluster %s) until it is heard again or the autonomy window ends",
                        live.name, silent, live.cluster,
                    )  # fmt: skip
                else:
                    log.info(
                        "node %s: no heartbeat for %.1fs: NotReady; its work is held for %.0fs",
                        live.name, silent, hold_s,
                    )  # fmt: skip
            for live in released:
                live.held = False
                await self.book.lose_node(
                    s, live.name, f"silent beyond its lease and a hold of {live.hold_s:.0f}s"
                )

    async def _heed_own_stall(self) -> None:
        """After a stall of the hub's own loop long enough to make nodes look silent, every node
        gets a fresh lease from when the hub woke (``leases.stall_matters``): logged once, with a
        ``HubStalled`` event, instead of blaming the nodes for the hub's deafness."""
        stall_s, woke_at = self.loop_watch.take()
        # No lease is shorter than the shortest ever given: most rounds skip the pass over nodes.
        if stall_s <= STALL_SHARE * self.registry.shortest_lease_s:
            return
        if not stall_matters(stall_s, self.nodes.values()):
            return
        self._resumed_at = woke_at  # before the store write: a failed write must not lose it
        log.warning("the hub stalled for %.1fs; leases extended (its nodes were not silent, it was)", stall_s)
        async with self.store.session() as s:
            Store.add_event(
                s,
                "HubStalled",
                "hub",
                self.settings.hub_id,
                f"the hub stalled for {stall_s:.1f}s; leases extended",
                {"stalled_s": round(stall_s, 3)},
            )

    def _note_partitions(self, expired: list[NodeLive], now: float) -> set[str]:
        """The clusters in a partition now (``leases.partitions``), each announced once."""
        found = partitions(expired, self.nodes.values(), now, self.federation.cluster) if expired else []
        for finding in found:
            if finding.cluster not in self._partitions:
                log.warning(
                    "cluster %s: %d of %d nodes silent at once: a partition; their work is held "
                    "for up to %.0fs (autonomy window) instead of being placed again",
                    finding.cluster, finding.silent, finding.members, finding.window_s,
                )  # fmt: skip
        # A partition lasts while nodes it held are still held (nodes held by the eviction grace
        # alone do not make one: a real partition there is still announced).
        clusters = {f.cluster for f in found}
        held = {n.cluster for n in self._held_nodes()}
        self._partitions = clusters | (self._partitions & held)
        return clusters

    async def _apply_answers(self, sent: list[Sent]) -> None:
        settled = [item for item in sent if item.effect is not AckEffect.NONE]
        if not settled:
            return
        async with self._lock, self.store.session() as s, self.book.refreshing_once(s):
            # One read for the round's placements (each answer then finds its row in the session).
            await queries.placements_by_id(s, {item.placement_id for item in settled})
            for item in settled:
                await self.book.apply_answer(s, item)


def _storable(text: str) -> bool:
    """False for a header aiohttp decoded with surrogateescape (not UTF-8): the store cannot keep it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
