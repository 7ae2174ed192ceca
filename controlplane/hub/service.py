"""The hub: node registry and leases, the workload lifecycle, and the reconcile loop.

State lives in the store; the hub keeps an in-memory view (node liveness, placement accounting)
that it rebuilds on start from the store and from the agents' re-registrations.

Lifecycle of a workload: Pending -> Scheduled -> Running -> Succeeded | Failed, or Cancelling ->
Cancelled after a DELETE. Each replica runs as a *placement* (one attempt on one node). A node that
misses its lease goes NotReady; its active placements become Lost and the replicas are placed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.aio import stop_task, wait_set
from edgeplane_contract.credentials import NatsTls
from edgeplane_contract.messages import (
    CommandAckV1,
    HeartbeatV1,
    PlacementState,
    RegisterAckV1,
    RegisterV1,
    StatusReportV1,
)
from edgeplane_contract.transport import PAYLOAD_MARGIN

from controlplane.bus.hub_bus import HubBus
from controlplane.errors import NotFoundError, ValidationError
from controlplane.federation.config import FederationConfig
from controlplane.hub.bidding import run_bid_round
from controlplane.hub.dispatch import AckEffect, Dispatcher, Sent, ack_effect
from controlplane.hub.leases import hold_for, hold_over, partitions, scan_leases
from controlplane.hub.lifecycle import (
    ReportEffect,
    late_success_blocked_by,
    missing_replicas,
    report_effect,
    workload_verdict,
)
from controlplane.hub.nodes import NodeLive
from controlplane.hub.placement import Placer, ReplicaChoice
from controlplane.hub.registration import RegistrationLimits
from controlplane.hub.registry import NodeRegistry, placement_node
from controlplane.hub.spec import WorkloadSpec
from controlplane.scheduling.profiles import Profile, load_profile
from controlplane.serverless.keepalive import Policy, make_policy
from controlplane.store import queries
from controlplane.store.identities import IdentityStore
from controlplane.store.models import NodeRow, PlacementRow, WorkloadRow
from controlplane.store.store import ACTIVE_PLACEMENT, TERMINAL_PLACEMENT, Store

if TYPE_CHECKING:  # the composition root builds it; the hub only calls it
    from controlplane.serverless.service import FunctionService

__all__ = ["Hub", "HubSettings"]

log = logging.getLogger("edgeplane.hub")


# How long stop() lets a reconcile round finish before it cancels the loop.
STOP_GRACE_S = 10.0


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass(slots=True)
class HubSettings:
    nats_url: str
    federation: FederationConfig
    lease_missed_heartbeats: int = 3
    reconcile_interval_s: float = 0.5
    command_timeout_s: float = 2.0
    nats_connect_within_s: float = 30.0
    # Parsed once, at the entry point (``commands.common.hub_settings``): the function keep-alive
    # policy (fresh, it learns from this hub's arrivals) and the placement profile.
    function_policy: Policy = field(default_factory=lambda: make_policy("edgeplane"))
    scheduler: Profile = field(default_factory=lambda: load_profile("edgeplane"))
    bid_deadline_ms: float = 50.0  # how long the bid round waits for local policies; 0: no bids
    hub_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    nats_seed: str | None = field(default=None, repr=False)  # the hub's nkey seed; None: anonymous
    nats_tls: NatsTls | None = None
    # Registrations only from nodes with active credentials, for the cluster they enrolled in (the
    # NATS server authenticates them; this is the hub's own check behind it).
    require_enrolment: bool = False
    registration: RegistrationLimits = field(default_factory=RegistrationLimits)


class _Seen:
    """A bounded set of processed message ids (duplicates and replays are no-ops)."""

    def __init__(self, size: int = 50_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def __contains__(self, key: str) -> bool:
        return key in self._ids

    def add(self, key: str) -> None:
        self._ids[key] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)


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
    ) -> None:
        """The parts come from the composition root (``hub.runner.build_hub``); ``functions``
        builds the function service, which takes this hub as its ``FunctionHost``."""
        self.settings = settings
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
        self.dispatch = Dispatcher(bus, self.nodes, resend_after_s=settings.command_timeout_s)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._seen_reports = _Seen()
        self._active: dict[str, tuple[str, int, str]] = {}  # placement id -> (workload, replica, node)
        self._last_hello = 0.0
        self._deaf: set[str] = set()  # clusters whose NATS connection is down (leases held)
        self._partitions: set[str] = set()  # clusters in a partition (their silent nodes' work held)
        self.started = False
        self.functions = functions(self)

    # --- start / stop ---------------------------------------------------------------------

    async def start(self) -> None:
        await self._load_state()
        await self.functions.start()
        await self.bus.start(self, connect_within_s=self.settings.nats_connect_within_s)
        self._task = asyncio.create_task(self._run(), name="hub-reconcile")
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
        for task in self.dispatch.background():
            await stop_task(task)
        await self.functions.stop()
        await self.bus.close()
        async with self._lock:
            await self.registry.flush(self.store)
        self.started = False

    async def _load_state(self) -> None:
        async with self.store.session() as s:
            for node in await self.registry.load(s):
                self.placer.upsert_node(placement_node(node, self.federation))
            active = await queries.active_placements(s)
            specs: dict[str, WorkloadSpec] = {}
            for placement in active:
                if placement.workload_id not in specs:
                    workload = await s.get(WorkloadRow, placement.workload_id)
                    if workload is None:
                        continue
                    specs[placement.workload_id] = WorkloadSpec.from_stored(workload.spec)
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
        while not self._stopping:
            try:
                await self.reconcile_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconcile failed; retrying")
            if self._stopping:
                break
            await wait_set(self._wake, self.settings.reconcile_interval_s)
            self._wake.clear()

    # --- agent messages -------------------------------------------------------------------

    def _refuse(self, node_name: str, reason: str) -> RegisterAckV1:
        self.bus.reject("register", node_name, reason)
        return RegisterAckV1(accepted=False, reason=reason, hub_id=self.settings.hub_id)

    async def handle_register(self, node_name: str, msg: RegisterV1) -> RegisterAckV1:
        refusal = await self.registry.refusal(node_name, msg)
        if refusal is not None:
            return self._refuse(node_name, refusal)
        async with self._lock, self.store.session() as s:
            row = await s.get(NodeRow, node_name)
            taken = self.registry.name_taken(row, msg)
            if taken is not None:
                return RegisterAckV1(accepted=False, reason=taken, hub_id=self.settings.hub_id)
            row, previous_boot = self.registry.register(s, row, msg)
            self.placer.upsert_node(placement_node(row, self.federation))
            if previous_boot != msg.boot_id:
                self.functions.node_lost(node_name)
            await self.registry.refresh_clusters(s)
            await self._reconcile_agent_placements(
                s, node_name, msg.placements, agent_restarted=previous_boot not in (None, msg.boot_id)
            )
            keep = await queries.kept_placement_ids(s, node_name)
        self.wake()
        return RegisterAckV1(accepted=True, hub_id=self.settings.hub_id, keep=keep)

    async def _reconcile_agent_placements(
        self, s: AsyncSession, node: str, reported: list[PlacementState], *, agent_restarted: bool
    ) -> None:
        """Merge what an agent says it runs with what the store says it should run."""
        by_id = {p.placement_id: p for p in reported}
        active = await queries.active_placements(s, node=node)
        for placement in active:
            state = by_id.pop(placement.id, None)
            if state is not None:
                await self._apply_state(s, placement, state)
            elif placement.acked or agent_restarted:
                await self._end_placement(s, placement, "Lost", "agent no longer has this placement")
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
        if self.registry.heard(live, msg):
            self.placer.set_node_power(node_name, msg.telemetry.power_source, msg.telemetry.battery_percent)
        self.functions.update_instances(node_name, msg.instances)
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
        if msg.report_id in self._seen_reports:
            return
        async with self._lock, self.store.session() as s:
            placement = await s.get(PlacementRow, msg.placement.placement_id)
            if placement is None:
                log.warning("report %s for unknown placement %s", msg.report_id, msg.placement.placement_id)
            elif placement.node != node_name:
                # A node speaking for another's placement: counted and dropped (defence in depth
                # behind the NATS permissions, which keep a node to its own report subject).
                self.bus.reject(
                    "report", node_name, f"placement {placement.id} runs on {placement.node}, not here"
                )
            else:
                await self._apply_state(s, placement, msg.placement)
        self._seen_reports.add(msg.report_id)
        self.wake()

    async def _apply_state(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """Move a placement forward by an agent's report (``lifecycle.report_effect``)."""
        effect = report_effect(placement.status, state.state)
        if effect is ReportEffect.LATE_SUCCESS:
            await self._late_success(s, placement, state)
            return
        if effect is ReportEffect.IGNORE:
            return
        now = time.time()
        if effect in (ReportEffect.START, ReportEffect.RESTARTS):
            if effect is ReportEffect.START:
                placement.status = "Running"
                placement.acked = True
                placement.started_at = state.started_at or now
                placement.updated_at = now
                Store.add_event(
                    s, "PlacementRunning", "workload", placement.workload_id, f"on {placement.node}"
                )
                await self._refresh_workload(s, placement.workload_id)
            # A Running report after the agent restarted the process locally is normal: it only
            # moves the restart count (and the message) forward; the placement stays Running.
            self._note_restarts(s, placement, state, now)
        else:  # ReportEffect.END
            self._note_restarts(s, placement, state, now)
            placement.exit_code = state.exit_code
            placement.started_at = placement.started_at or state.started_at
            await self._end_placement(s, placement, state.state, state.message, finished_at=state.finished_at)

    async def _late_success(self, s: AsyncSession, placement: PlacementRow, state: PlacementState) -> None:
        """A replica reported Succeeded after its placement was marked Lost (its node was silent,
        not dead). It wins unless a later attempt of the replica may have started: then the replica
        is done, and the re-placement is cancelled before it runs."""
        others = await queries.other_attempts(s, placement)
        started = late_success_blocked_by(placement, others)
        if started:
            log.info(
                "late success of %s on %s ignored: replica %d already ran again on %s",
                placement.id,
                placement.node,
                placement.replica,
                started[0].node,
            )
            return
        now = time.time()
        placement.status = "Succeeded"
        placement.exit_code = state.exit_code
        placement.started_at = placement.started_at or state.started_at
        placement.finished_at = state.finished_at or now
        placement.message = "finished while its node was unreachable"
        placement.updated_at = now
        replacements = [p for p in others if p.status in ACTIVE_PLACEMENT]
        self._request_stops(replacements, "the replica finished on its earlier node")
        Store.add_event(
            s,
            "PlacementSucceeded",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: finished while its node was unreachable"
            + (f"; re-placement on {replacements[0].node} cancelled" if replacements else ""),
            {"placement_id": placement.id, "exit_code": placement.exit_code, "late": True},
        )
        log.info(
            "late success of %s on %s wins: replica %d is done%s",
            placement.id,
            placement.node,
            placement.replica,
            f", re-placement {replacements[0].id} on {replacements[0].node} cancelled"
            if replacements
            else "",
        )
        await self._refresh_workload(s, placement.workload_id)

    def _note_restarts(
        self, s: AsyncSession, placement: PlacementRow, state: PlacementState, now: float
    ) -> None:
        """Record local restarts the agent reports; counts only grow (replays and reordering are no-ops)."""
        if state.restarts <= (placement.restarts or 0):
            return
        placement.restarts = state.restarts
        placement.updated_at = now
        if state.state == "Running":
            placement.message = state.message
        Store.add_event(
            s,
            "PlacementRestarted",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: restart {state.restarts}"
            + (f" ({state.message})" if state.state == "Running" and state.message else ""),
            {"placement_id": placement.id, "restarts": state.restarts},
        )

    async def _end_placement(
        self,
        s: AsyncSession,
        placement: PlacementRow,
        status: str,
        message: str,
        *,
        finished_at: float | None = None,
    ) -> None:
        now = time.time()
        placement.status = status
        placement.message = message
        placement.finished_at = finished_at or now
        placement.updated_at = now
        self.placer.release(placement.workload_id, placement.replica)
        self._active.pop(placement.id, None)
        Store.add_event(
            s,
            f"Placement{status}",
            "workload",
            placement.workload_id,
            f"replica {placement.replica} on {placement.node}: {message or status}"
            + (f" (exit code {placement.exit_code})" if placement.exit_code is not None else ""),
            {"placement_id": placement.id, "exit_code": placement.exit_code},
        )
        await self._refresh_workload(s, placement.workload_id)

    # --- workload status ------------------------------------------------------------------

    async def _refresh_workload(self, s: AsyncSession, workload_id: str) -> None:
        workload = await s.get(WorkloadRow, workload_id)
        if workload is None:
            return
        placements = await queries.placements_of(s, workload_id, ordered=True)
        verdict = workload_verdict(workload.replicas, workload.cancel_requested, placements)
        if verdict.stop_active is not None:
            self._request_stops([p for p in placements if p.status in ACTIVE_PLACEMENT], verdict.stop_active)
        if verdict.message is not None:
            workload.message = verdict.message
        status = verdict.status
        if status != workload.status:
            now = time.time()
            Store.add_event(
                s,
                f"Workload{status}",
                "workload",
                workload.id,
                workload.message if status == "Failed" else "",
            )
            workload.status = status
            workload.updated_at = now
            if status in ("Succeeded", "Failed", "Cancelled"):
                workload.finished_at = now
                if status == "Succeeded":
                    workload.message = ""

    def _request_stops(self, placements: list[PlacementRow], reason: str) -> None:
        for placement in placements:
            if placement.stop_command_id is None:
                placement.stop_command_id = new_id()
                placement.message = reason
                placement.updated_at = time.time()
        self.wake()

    # --- API operations -------------------------------------------------------------------

    async def create_workload(
        self, spec: WorkloadSpec, *, idempotency_key: str | None = None
    ) -> tuple[str, bool]:
        """Store a new workload; with an idempotency key a retried POST returns the first one."""
        spec.check_fits(self.bus.max_payload - PAYLOAD_MARGIN)
        if idempotency_key and not _storable(idempotency_key):
            raise ValidationError("must be valid UTF-8", field="Idempotency-Key")
        if idempotency_key:
            existing = await self.store.find_workload_by_key(idempotency_key)
            if existing is not None:
                return existing.id, False
        now = time.time()
        workload_id = new_id()
        async with self._lock, self.store.session() as s:
            s.add(
                WorkloadRow(
                    id=workload_id,
                    name=spec.name,
                    status="Pending",
                    spec=spec.to_dict(),
                    replicas=spec.replicas,
                    priority=spec.priority,
                    idempotency_key=idempotency_key,
                    created_at=now,
                    updated_at=now,
                )
            )
            Store.add_event(s, "WorkloadCreated", "workload", workload_id, spec.name)
        self.wake()
        return workload_id, True

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
            self._request_stops(active, "cancelled by user")
            await self._refresh_workload(s, workload_id)

    def node_capacity(self, node: str) -> dict[str, Any]:
        """What a node offers (cpu, memory, gpus, dpu), as placement knows it."""
        return self.placer.capacity(node)

    def allocated(self, node: str) -> dict[str, Any]:
        return self.placer.allocated(node)

    # --- the reconcile loop ---------------------------------------------------------------

    async def reconcile_once(self) -> None:
        async with self._lock:
            await self._expire_leases()
            await self._place_pending()
            await self.registry.flush(self.store)
            async with self.store.session() as s:
                due = await self.dispatch.due(s)
        if due:
            await self._apply_answers(await self.dispatch.send(due))

    async def _set_node_status(self, s: AsyncSession, live: NodeLive, status: str, why: str) -> None:
        if status != "Ready":
            self.functions.node_lost(live.name)
        self.placer.set_node_ready(live.name, status == "Ready")
        await self.registry.set_status(s, live, status, why)

    async def _expire_leases(self) -> None:
        """NotReady for nodes silent longer than their lease; their placements Lost, or held for
        a while (a partition, the eviction grace): the rules are in ``hub.leases``."""
        now = asyncio.get_running_loop().time()
        scan = scan_leases(self.nodes.values(), now, self.bus.hearing_since)
        for cluster in sorted(scan.deaf - self._deaf):
            log.warning("NATS connection for cluster %s is down: node leases held until it is back", cluster)
        for cluster in sorted(self._deaf - scan.deaf):
            log.info("NATS connection for cluster %s is back: every node gets a full lease", cluster)
        self._deaf = scan.deaf
        partitioned = self._note_partitions(scan.expired, now)
        released = [n for n in self.nodes.values() if n.held and hold_over(n, now, self.bus.hearing_since)]
        if not scan.expired and not released:
            return
        async with self.store.session() as s:
            for live in scan.expired:
                silent = now - live.last_seen
                await self._set_node_status(s, live, "NotReady", f"no heartbeat for {silent:.1f}s")
                in_partition = live.cluster in partitioned
                hold_s = hold_for(self.federation.cluster(live.cluster), partitioned=in_partition)
                if hold_s is None:
                    await self._lose_placements(
                        s, live, f"no heartbeat for {silent:.1f}s (lease {live.lease_s:.1f}s)"
                    )
                    continue
                live.held, live.hold_s = True, hold_s
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
                await self._lose_placements(
                    s, live, f"silent beyond its lease and a hold of {live.hold_s:.0f}s"
                )

    def _note_partitions(self, expired: list[NodeLive], now: float) -> set[str]:
        """The clusters in a partition now (``leases.partitions``), each announced once."""
        found = partitions(expired, self.nodes.values(), now, self.federation.cluster)
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
        held = {n.cluster for n in self.nodes.values() if n.held}
        self._partitions = clusters | (self._partitions & held)
        return clusters

    async def _lose_placements(self, s: AsyncSession, live: NodeLive, why: str) -> None:
        placements = await queries.active_placements(s, node=live.name)
        if placements:
            log.info("node %s: %s: %d placement(s) Lost, to be placed again", live.name, why, len(placements))
        for placement in placements:
            await self._end_placement(s, placement, "Lost", f"node {live.name} lease expired")

    async def _place_pending(self) -> None:
        async with self.store.session() as s:
            pending = await queries.pending_workloads(s, limit=200)
            for workload in pending:
                placements = await queries.placements_of(s, workload.id)
                latest = {p.replica: p for p in sorted(placements, key=lambda p: p.attempt)}
                missing = missing_replicas(workload.replicas, placements)
                if not missing:
                    await self._refresh_workload(s, workload.id)
                    continue
                spec = WorkloadSpec.from_stored(workload.spec)
                outcome = self.placer.place(workload.id, spec, missing)
                if self.settings.bid_deadline_ms > 0 and outcome.choices:
                    # One deadline for all replicas of the workload, not one each: the rounds wait on
                    # the network together; each move after its round is synchronous (no interleaving).
                    outcome.choices = list(
                        await asyncio.gather(
                            *(self._with_bids(workload.id, spec, c) for c in outcome.choices)
                        )
                    )
                now = time.time()
                for choice in outcome.choices:
                    attempt = latest[choice.replica].attempt + 1 if choice.replica in latest else 1
                    placement = PlacementRow(
                        id=new_id(),
                        workload_id=workload.id,
                        replica=choice.replica,
                        attempt=attempt,
                        node=choice.node,
                        cluster=choice.cluster,
                        status="Scheduled",
                        command_id=new_id(),
                        assignment=choice.assignment,
                        explanation=choice.explanation,
                        scheduled_at=now,
                        updated_at=now,
                    )
                    s.add(placement)
                    self._active[placement.id] = (workload.id, choice.replica, choice.node)
                    Store.add_event(
                        s,
                        "PlacementScheduled",
                        "workload",
                        workload.id,
                        f"replica {choice.replica} -> {choice.node} (attempt {attempt})",
                        {"node": choice.node, "replica": choice.replica},
                    )
                if outcome.victims:
                    await self._preempt(s, outcome.victims, by=workload)
                if outcome.choices:
                    await s.flush()
                    workload.message = outcome.unschedulable_reason
                    await self._refresh_workload(s, workload.id)
                elif outcome.unschedulable_reason and workload.message != outcome.unschedulable_reason:
                    workload.message = outcome.unschedulable_reason
                    workload.updated_at = now
                    Store.add_event(
                        s, "FailedScheduling", "workload", workload.id, outcome.unschedulable_reason
                    )

    async def _with_bids(self, workload_id: str, spec: WorkloadSpec, choice: ReplicaChoice) -> ReplicaChoice:
        """Let the candidates' local policies bid; move the replica if another node wins."""
        result = await run_bid_round(
            self.registry, workload_id, spec, choice, deadline_ms=self.settings.bid_deadline_ms
        )
        if result is None:
            return choice
        bids = {"decided_by": result.decided_by, "winner": result.winner, "candidates": result.table}
        if result.winner != choice.node:
            self.placer.release(workload_id, choice.replica)
            pinned = dataclasses.replace(
                spec, affinity=dataclasses.replace(spec.affinity, nodes=[result.winner])
            )
            moved = self.placer.place(workload_id, pinned, [choice.replica])
            if moved.choices:
                choice = moved.choices[0]
            else:  # the winner no longer fits (raced): keep the scheduler's choice
                again = self.placer.place(workload_id, spec, [choice.replica])
                if not again.choices:
                    raise RuntimeError("replica could not be placed again after a bid round")
                choice = again.choices[0]
                bids["decided_by"] = "scheduler (winner no longer fits)"
        choice.explanation = {**choice.explanation, "bids": bids}
        return choice

    async def _preempt(self, s: AsyncSession, victims: list[tuple[str, int]], *, by: WorkloadRow) -> None:
        """Stop replicas the scheduler evicted for ``by``; they return to Pending when stopped."""
        for workload_id, replica in victims:
            active = await queries.active_placements(s, workload_id=workload_id, replica=replica)
            self._request_stops(active, f"preempted by {by.name} ({by.id}, priority {by.priority})")
            Store.add_event(
                s,
                "Preempted",
                "workload",
                workload_id,
                f"replica {replica} preempted by {by.name} (priority {by.priority})",
                {"by": by.id},
            )

    async def _apply_answers(self, sent: list[Sent]) -> None:
        """What the agents' answers to commands mean for their placements (``dispatch.ack_effect``)."""
        async with self._lock, self.store.session() as s:
            for item in sent:
                effect = ack_effect(item.command, item.answer)
                if effect is AckEffect.NONE:
                    continue
                placement = await s.get(PlacementRow, item.placement_id)
                if placement is None or placement.status in TERMINAL_PLACEMENT:
                    continue
                if effect is AckEffect.TOO_LARGE:
                    # Resending cannot help: fail the replica with the reason instead of leaving it
                    # Scheduled forever (specs accepted by an older hub, or a server with a lower limit).
                    await self._end_placement(s, placement, "Failed", f"run command not sent: {item.answer}")
                elif effect is AckEffect.RUN_ACKED:
                    placement.acked = True
                elif effect is AckEffect.RUN_REFUSED:
                    reason = item.answer.reason if isinstance(item.answer, CommandAckV1) else ""
                    await self._end_placement(s, placement, "Lost", f"agent refused: {reason}")
                elif effect is AckEffect.NEVER_RAN:
                    await self._end_placement(s, placement, "Cancelled", placement.message or "cancelled")
                elif effect is AckEffect.STOP_ACKED:
                    placement.stop_acked = True


def _storable(text: str) -> bool:
    """False for a header aiohttp decoded with surrogateescape (not UTF-8): the store cannot keep it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
