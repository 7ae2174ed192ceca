"""The scheduler facade the hub and the simulator drive: pure, in-memory, synchronous.

Typical use by the hub::

    sched = Scheduler("edgeplane", federation)
    sched.upsert_node(NodeState(name="n1", cpu=64, memory=256 * 2**30, ...))   # on heartbeat
    decision = sched.schedule(WorkloadRequest(id="w1", resources=ResourceRequest(cpu=2)))
    for p in decision.placements:          # dispatch p.replica to p.node with p.assignment
        ...
    for v in decision.victims:             # stop evicted replicas (and resubmit them)
        ...
    sched.release("w1", 0)                 # when a replica ends
    for d in sched.schedule_pending():     # workloads that waited for capacity
        ...

After a restart, rebuild accounting with :meth:`Scheduler.reserve_existing` from the store.
The object holds no locks: callers serialise calls (the hub from its event loop).

``Scheduler`` coordinates; the work is done by :mod:`.plugin_set` (the profile's plugins),
:mod:`.cycle` (one cycle per replica) with :mod:`.explain`, :mod:`.placement` (a workload's
replicas, post-filters, gangs) with :mod:`.commit` (reserve/bind, rollback),
:mod:`.federation_plan` (clusters), :mod:`.pending` (waiting work) and :mod:`.reward`.
About 480 lines: the facade's public API, each method a short delegation with its contract.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from edgeplane_contract.objective import RewardBreakdown, RewardConfig
from edgeplane_contract.power import PowerModel

from controlplane.federation.config import FederationConfig
from controlplane.federation.placement import ClusterAggregate
from controlplane.scheduling.cycle import Chooser, CycleRunner
from controlplane.scheduling.federation_plan import cluster_aggregates
from controlplane.scheduling.framework import FloatArray, PluginFactory, Status
from controlplane.scheduling.instrument import FrameworkRecorder, instrument, timed_attempt
from controlplane.scheduling.interference import (
    InterferenceEstimate,
    InterferenceEstimator,
    InterferencePrior,
    LoadProfile,
)
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import (
    Affinity,
    AntiAffinity,
    Assignment,
    Decision,
    Feasibility,
    GpuDevice,
    NodeState,
    ReplicaPlacement,
    Victim,
    WorkloadRequest,
)
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.pending import request_from_allocation, retry_pending
from controlplane.scheduling.placement import Placer
from controlplane.scheduling.plugin_set import PluginSet, WeightedScorer, build_plugin_set
from controlplane.scheduling.profiles import Profile, load_profile
from controlplane.scheduling.queue import SchedulingQueue
from controlplane.scheduling.reward import energy_weights, placement_reward
from controlplane.scheduling.sla_risk import SlaRiskEstimator, SlaRiskTable
from controlplane.scheduling.topology import TopologyGraph
from controlplane.scheduling.verdicts import NodeVerdict, node_scores, node_verdicts

__all__ = [
    "Affinity",
    "AntiAffinity",
    "Assignment",
    "Decision",
    "Feasibility",
    "GpuDevice",
    "NodeState",
    "ReplicaPlacement",
    "Scheduler",
    "Victim",
    "WorkloadRequest",
]


class Scheduler:
    """Places workload replicas on nodes with a profile of plugins; see the module docstring."""

    def __init__(
        self,
        profile: str | Mapping[str, Any] | Profile = "default",
        federation: FederationConfig | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        power: PowerModel | None = None,
        topology: TopologyGraph | None = None,
        explain_top: int = 3,
        preemption_retry_s: float = 30.0,
        recorder: FrameworkRecorder | None = None,
        registry: Mapping[str, PluginFactory] | None = None,
    ) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        self.registry = registry
        """The plugin factories by name (None: the built-in registry); a value, never mutated."""
        self.federation = federation
        self.nodes = NodeTable()
        self.ledger = Ledger(self.nodes)
        self.power = power or PowerModel()
        self.topology = topology or TopologyGraph(
            region_latency_ms=federation.latency_between if federation is not None else None
        )
        self.queue = SchedulingQueue()
        self.explain_top = explain_top
        self.preemption_retry_s = preemption_retry_s
        self._clock = clock or time.monotonic
        self._epoch = 0
        self._unavailable: set[str] = set()
        self._zone_meta: dict[int, tuple[str, str]] = {}
        self._zone_clusters: list[str] = []  # by zone id, from _zone_meta
        self._zone_regions: list[str] = []
        self.stats = {"cycles": 0, "scheduled": 0, "unschedulable": 0, "preemptions": 0, "merges": 0}
        # Plugins get the scheduler itself as their Handle (nodes, ledger, topology, power).
        self.plugins = build_plugin_set(self.profile, self, registry)
        self.recorder = recorder
        """Who receives attempt, extension-point and plugin timings (the hub's metrics); None: nobody."""
        if recorder is not None:
            instrument(self.plugins, recorder, self.profile.name)
        self._cycles = CycleRunner(
            self.nodes,
            self.plugins,
            self.profile,
            clock=self._clock,
            rng=random.Random(seed),
            unavailable=self._unavailable,
            stats=self.stats,
            explain_top=explain_top,
        )
        self._placer = Placer(
            self._cycles, self.ledger, federation, unavailable=self._unavailable, stats=self.stats
        )
        self._profile_placers: dict[str, tuple[Profile, Placer]] = {}
        """Per other profile (a profile canary's), a placer with its plugins over this node table
        and this ledger: both profiles see and reserve the same capacity."""
        self._filter_runners: dict[str, CycleRunner] = {}
        """Per other profile (e.g. ``functions``), a runner of its filters over this node table."""
        cfg = self.plugins.reward_config
        self.ledger.kind_sensitivity = dict(cfg.sensitivity)
        self.interference: InterferenceEstimator | None = None
        """The online interference estimator (profiles with ``reward.interference: learned``)."""
        if cfg.interference == "learned":
            self.interference = InterferenceEstimator(
                InterferencePrior(knee=cfg.knee, sensitivity=dict(cfg.sensitivity), io_penalty=cfg.io_penalty)
            )
        self.sla_risk: SlaRiskEstimator | None = None
        """The SLA-miss risk learned from outcomes (profiles with ``reward.sla_risk_weight`` > 0)."""
        if cfg.sla_risk_weight > 0.0:
            self.sla_risk = SlaRiskEstimator()
        self.interference_refresh = 25
        """Observations between two refits of the estimate the scores use."""

    # -- the profile's plugins -------------------------------------------------------------

    @property
    def chooser(self) -> Chooser | None:
        """Who picks among each cycle's scored candidates instead of the profile's selection
        (see :class:`.cycle.Choice`; the simulator's stepping API); None: the profile."""
        return self._cycles.chooser

    @chooser.setter
    def chooser(self, chooser: Chooser | None) -> None:
        self._cycles.chooser = chooser

    @property
    def _scorers(self) -> list[WeightedScorer]:
        # Kept for tests that look up a built score plugin (tests/unit/policy).
        return self.plugins.scorers

    @property
    def _reward_config(self) -> RewardConfig:
        # Kept for tests that compare a plugin's reward with the scheduler's (tests/unit/policy).
        return self.plugins.reward_config

    def observe_runtime(self, kind: str, expected_s: float, observed_s: float, load: LoadProfile) -> None:
        """A replica of ``kind`` finished in ``observed_s`` against ``expected_s`` alone, on a node
        whose load while it ran was ``load`` (from the agent's report or the simulator's node).
        Feeds the interference estimator and the SLA-risk table; a no-op for profiles that
        learn neither."""
        risk = self.sla_risk
        if risk is not None and risk.observe(kind, expected_s, observed_s, load):
            if len(risk) % self.interference_refresh == 0:
                self.use_sla_risk(risk.table())
        est = self.interference
        if est is None or not est.observe(kind, expected_s, observed_s, load):
            return
        if len(est) % self.interference_refresh == 0:
            self.use_interference(est.estimate())

    def use_sla_risk(self, table: SlaRiskTable) -> None:
        """Score with ``table`` (plugins that take one), this profile's and a canary's beside it."""
        _with_sla_risk(self.plugins, table)
        for _, placer in self._profile_placers.values():
            _with_sla_risk(placer.plugins, table)

    def use_interference(self, estimate: InterferenceEstimate) -> None:
        """Score and account new replicas with ``estimate`` (plugins that take one), this
        profile's and those of another profile placing beside it (a profile canary's candidate)
        that learns too: the candidate is judged as it would place once promoted."""
        self.ledger.kind_sensitivity = {**self.ledger.kind_sensitivity, **estimate.sensitivity}
        _learned(self.plugins, estimate)
        for _, placer in self._profile_placers.values():
            if placer.plugins.reward_config.interference == "learned":
                _learned(placer.plugins, estimate)

    @property
    def battery_aware(self) -> bool:
        """Whether this profile raises the energy weight on battery (an adaptive rule is on)."""
        return self.plugins.energy_rule is not None

    def energy_weights(self, names: Sequence[str]) -> FloatArray:
        """The energy weight ``w3`` of each named node under this profile's rule (see
        :func:`.reward.energy_weights`); unknown names get the configured ``w3``."""
        return energy_weights(self, self.plugins, names)

    # -- nodes -----------------------------------------------------------------------------

    def _grew(self, rows: Iterable[int]) -> None:
        """Free capacity grew on these rows: a new epoch, remembered per row for retries."""
        self._epoch += 1
        for row in rows:
            self.nodes.freed_at[row] = self._epoch

    def upsert_node(self, node: NodeState) -> None:
        """Add a node or update its facts (capacity, labels, readiness, battery)."""
        known = node.name in self.nodes.index
        if known:
            row = self.nodes.index[node.name]
            old = self.nodes.states[row]
            grew = node.cpu > old.cpu or node.memory > old.memory or (node.ready and not old.ready)
            grew = grew or len(node.gpus) != len(old.gpus) or node.dpus > old.dpus
        else:
            grew = True
        row = self.nodes.upsert(node)
        self.ledger.reapply(node.name)
        zone = int(self.nodes.zone[row])
        if zone not in self._zone_meta:
            self._zone_meta[zone] = (node.cluster, node.region)
            zones = self.nodes.zones.names
            # Kept beside _zone_meta, one entry per zone id: rebuilt per new zone, they made a
            # fleet's first registrations quadratic (10,000 nodes, 10,000 zones: 12 s of CPU).
            del self._zone_clusters[len(zones) :], self._zone_regions[len(zones) :]
            for z in range(len(self._zone_clusters), len(zones)):
                cluster, region = self._zone_meta.get(z, ("", ""))
                self._zone_clusters.append(cluster)
                self._zone_regions.append(region)
            self._zone_clusters[zone], self._zone_regions[zone] = node.cluster, node.region
            self.topology.set_zones(list(zones), self._zone_clusters, self._zone_regions)
        if grew:
            self._grew([row])

    def remove_node(self, name: str) -> list[tuple[str, int]]:
        """Forget a node; returns the (workload, replica) pairs that were running on it."""
        if name not in self.nodes.index:
            return []
        lost = self.ledger.drop_node(name)
        self.nodes.remove(name)
        self._cycles.next_start = 0  # rows shifted: sampling starts over
        return [(a.workload_id, a.replica) for a in lost]

    def set_node_ready(self, name: str, ready: bool) -> None:
        row = self.nodes.index[name]
        if bool(self.nodes.ready[row]) != ready:
            self.nodes.set_ready(row, ready)
            if ready:
                self._grew([row])

    def node(self, name: str) -> NodeState:
        """The node as last reported, with the scheduler's allocated amounts filled in."""
        row = self.nodes.index[name]
        allocs = self.ledger.on_node(name)
        return replace(
            self.nodes.states[row],
            cpu_allocated=float(self.nodes.cpu_alloc[row]),
            memory_allocated=int(self.nodes.mem_alloc[row]),
            gpus_allocated=sorted(g for a in allocs for g in a.assignment.gpus),
            mig_allocated=[s for a in allocs for s in a.assignment.mig],
            dpus_allocated=sorted(d for a in allocs for d in a.assignment.dpus),
            ephemeral_storage_allocated=int(self.nodes.eph_alloc[row]),
        )

    def observe_link(
        self, node_a: str, node_b: str, latency_ms: float, bandwidth: float, at: float | None = None
    ) -> None:
        """Feed one network measurement (bytes/s) between two nodes into the topology graph."""
        za = int(self.nodes.zone[self.nodes.index[node_a]])
        zb = int(self.nodes.zone[self.nodes.index[node_b]])
        self.topology.observe(za, zb, latency_ms, bandwidth, self._clock() if at is None else at)

    def set_cluster_available(self, cluster: str, available: bool) -> None:
        if available:
            if cluster in self._unavailable:
                self._unavailable.discard(cluster)
                cid = self.nodes.clusters.ids.get(cluster)
                self._grew(np.flatnonzero(self.nodes.cluster == cid) if cid is not None else [])
        else:
            self._unavailable.add(cluster)

    # -- public scheduling API -------------------------------------------------------------

    def schedule(
        self,
        request: WorkloadRequest,
        *,
        replicas: Iterable[int] | None = None,
        enqueue: bool = True,
        explain: bool = True,
        profile: Profile | None = None,
    ) -> Decision:
        """Place every replica of ``request`` not placed yet (all or none for a gang).

        ``replicas`` limits the call to those replica indices (e.g. one whose node died).
        Replicas that fit nowhere (even after preemption / fragment merge) wait in the queue when
        ``enqueue`` and are retried by :meth:`schedule_pending` once capacity frees.
        ``profile``: place with another profile's plugins (a profile canary's) over the same
        nodes and reservations; None: this scheduler's own.
        """
        placed = self.ledger.of_workload(request.id)
        wanted = range(request.replicas) if replicas is None else sorted(set(replicas))
        todo = [r for r in wanted if r not in placed]
        if not todo:
            return Decision(
                request.id,
                Status.success(),
                [
                    ReplicaPlacement(
                        r, a.node, self.nodes.states[self.nodes.index[a.node]].cluster, a.assignment
                    )
                    for r, a in sorted(placed.items())
                    if r in wanted
                ],
            )
        placer, name = self._placer, self.profile.name
        if profile is not None and profile is not self.profile:
            placer, name = self._placer_of(profile), profile.name
        if self.recorder is None:
            decision = placer.place(request, todo, explain)
        else:
            decision = timed_attempt(self.recorder, name, lambda: placer.place(request, todo, explain))
        missing = [p.replica for p in decision.placements if not p.placed]
        if missing and enqueue:
            self.queue.push(
                request, missing, epoch=self._epoch, reason=decision.status.message(), now=self._clock()
            )
            decision.queued = True
        else:
            self.queue.discard(request.id, [p.replica for p in decision.placements if p.placed])
        return decision

    def _placer_of(self, profile: Profile) -> Placer:
        """The placer of another profile, built once per profile object. Where that profile learns
        interference too, its plugins score with the estimate this scheduler learned online (as
        they would once promoted, :meth:`use_profile`), else with their profile's prior."""
        kept = self._profile_placers.get(profile.name)
        if kept is not None and kept[0] is profile:
            return kept[1]
        cycles = self._runner_of(profile)
        placer = Placer(cycles, self.ledger, self.federation, unavailable=self._unavailable, stats=self.stats)
        self._profile_placers[profile.name] = (profile, placer)
        learned = self.interference
        if learned is not None and len(learned) and cycles.plugins.reward_config.interference == "learned":
            _learned(cycles.plugins, learned.estimate())  # what this scheduler learned so far
        if self.sla_risk is not None and len(self.sla_risk):
            _with_sla_risk(cycles.plugins, self.sla_risk.table())
        return placer

    def _runner_of(self, profile: Profile) -> CycleRunner:
        """A cycle runner of ``profile``'s plugins (built, instrumented) over this node table."""
        plugins = build_plugin_set(profile, self, self.registry)
        if self.recorder is not None:
            instrument(plugins, self.recorder, profile.name)
        return CycleRunner(
            self.nodes,
            plugins,
            profile,
            clock=self._clock,
            rng=random.Random(0),
            unavailable=self._unavailable,
            stats=self.stats,
            explain_top=self.explain_top,
        )

    def use_profile(self, profile: Profile) -> None:
        """Place with ``profile`` from now on (a promoted profile canary): its plugins over the
        same nodes, reservations and queue; a chooser attached stays attached, and the online
        interference estimate is kept while the new profile learns one too."""
        if profile is self.profile:
            return
        chooser = self._cycles.chooser
        self.profile = profile
        self._cycles = self._runner_of(profile)
        self.plugins = self._cycles.plugins
        self._cycles.chooser = chooser
        self._placer = Placer(
            self._cycles, self.ledger, self.federation, unavailable=self._unavailable, stats=self.stats
        )
        self._profile_placers.pop(profile.name, None)
        cfg = self.plugins.reward_config
        self.ledger.kind_sensitivity = dict(cfg.sensitivity)
        if cfg.interference != "learned":
            self.interference = None
        elif self.interference is None:
            self.interference = InterferenceEstimator(
                InterferencePrior(knee=cfg.knee, sensitivity=dict(cfg.sensitivity), io_penalty=cfg.io_penalty)
            )
        elif len(self.interference):
            self.use_interference(self.interference.estimate())  # what was learned, to the new plugins
        if cfg.sla_risk_weight <= 0.0:
            self.sla_risk = None
        elif self.sla_risk is None:
            self.sla_risk = SlaRiskEstimator()
        elif len(self.sla_risk):
            self.use_sla_risk(self.sla_risk.table())

    def feasible_nodes(self, request: WorkloadRequest, profile: Profile | None = None) -> Feasibility:
        """The nodes where one replica of ``request`` fits now, by the PreFilter and Filter plugins
        of ``profile`` (default: this scheduler's own) over this scheduler's nodes and
        reservations. Nothing is reserved: the caller prices the nodes itself (the function
        router does, with the ``functions`` profile)."""
        if profile is None or profile.name == self.profile.name:
            return self._cycles.feasible(request)
        runner = self._filter_runners.get(profile.name)
        if runner is None or runner.profile is not profile:
            runner = self._filter_runners[profile.name] = self._runner_of(profile)
        return runner.feasible(request)

    def filter_nodes(self, request: WorkloadRequest, names: Sequence[str]) -> dict[str, NodeVerdict]:
        """Per named node: does one replica of ``request`` pass this profile's PreFilter and
        Filter now, and if not, the reason and whether preemption could help (see
        :mod:`.verdicts`; nothing reserved, scored or counted)."""
        return node_verdicts(self._cycles, request, names)

    def score_nodes(self, request: WorkloadRequest, names: Sequence[str]) -> dict[str, float]:
        """This profile's Score totals for the named nodes that pass Filter now (the others are
        left out); no sampling, no random draw, nothing reserved."""
        return node_scores(self._cycles, request, names)

    def schedule_pending(self, *, limit: int | None = None, explain: bool = True) -> list[Decision]:
        """Retry waiting workloads (highest priority first) that capacity changes may now fit.

        A waiting workload is retried only if some node whose free capacity grew since its last
        attempt could hold one of its replicas (the others only lost capacity since), or, at most
        every ``preemption_retry_s``, if it could preempt. Returns the decisions that placed at
        least one replica; the rest keep waiting.
        """
        return retry_pending(
            self.queue,
            self._placer,
            epoch=self._epoch,
            now=self._clock(),
            preemption_retry_s=self.preemption_retry_s,
            limit=limit,
            explain=explain,
        )

    def pending(self) -> list[dict[str, Any]]:
        """The waiting workloads, in retry order."""
        return [e.to_dict() for e in self.queue.ordered()]

    def cancel(self, workload_id: str) -> bool:
        """Stop waiting for a workload (it was deleted or gave up). True if it was queued."""
        return self.queue.remove(workload_id) is not None

    def release(self, workload_id: str, replica: int | None = None) -> int:
        """Free a replica's resources (or all of the workload's when ``replica`` is None)."""
        replicas = [replica] if replica is not None else list(self.ledger.of_workload(workload_id))
        rows = []
        for r in replicas:
            alloc = self.ledger.remove(workload_id, r)
            if alloc is not None and alloc.node in self.nodes.index:
                rows.append(self.nodes.index[alloc.node])
        if rows:
            self._grew(rows)
        return len(rows)

    def reserve_existing(
        self,
        workload_id: str,
        replica: int,
        node: str,
        assignment: Assignment,
        *,
        priority: int = 0,
        kind: str = "service",
        request: WorkloadRequest | None = None,
    ) -> Status:
        """Record a replica that already runs (hub restart). Refuses over-commit with a Status."""
        row = self.nodes.index.get(node)
        if row is None:
            return Status.unresolvable(f"unknown node {node!r}")
        if self.ledger.get(workload_id, replica) is not None:
            return Status.unresolvable(f"replica {replica} of {workload_id!r} is already placed")
        problem = self.nodes.check(row, assignment)
        if problem is not None:
            return Status.unschedulable(problem)
        self.ledger.add(Allocation(workload_id, replica, node, assignment, priority, kind, request))
        return Status.success()

    def failover(self, unavailable_clusters: Iterable[str], *, explain: bool = True) -> list[Decision]:
        """Mark clusters unavailable and re-place their replicas on the other clusters."""
        down = set(unavailable_clusters)
        for cluster in down:
            self.set_cluster_available(cluster, False)
        moved: dict[str, list[Allocation]] = {}
        for alloc in self.ledger:
            row = self.nodes.index.get(alloc.node)
            if row is not None and self.nodes.states[row].cluster in down:
                moved.setdefault(alloc.workload_id, []).append(alloc)
        decisions: list[Decision] = []
        freed_rows = [self.nodes.index[a.node] for allocs in moved.values() for a in allocs]
        for wid, allocs in moved.items():
            for alloc in allocs:
                self.ledger.remove(wid, alloc.replica)
            request = allocs[0].request or request_from_allocation(allocs[0])
            # No anti-affinity rewrite: the unavailable set keeps the cluster out, and a replica
            # left waiting may return there once the cluster is back.
            replicas = sorted(a.replica for a in allocs)
            decision = self._placer.place(request, replicas, explain)
            missing = [p.replica for p in decision.placements if not p.placed]
            if missing:
                self.queue.push(
                    request, missing, epoch=self._epoch, reason=decision.status.message(), now=self._clock()
                )
                decision.queued = True
            decision.explanation = replace(decision.explanation, failover_from=tuple(sorted(down)))
            decisions.append(decision)
        self._grew(freed_rows)
        return decisions

    # -- federation, RL, debugging ---------------------------------------------------------

    def aggregates(self) -> dict[str, ClusterAggregate]:
        """Free capacity per cluster over ready nodes (the input of cluster-level placement)."""
        return cluster_aggregates(self.nodes)

    def reward_of(self, request: WorkloadRequest, node: str, assignment: Assignment) -> RewardBreakdown:
        """The reward R of placing ``assignment`` of ``request`` on ``node`` now (for trainers)."""
        return placement_reward(self, self.plugins, request, node, assignment, self._clock())

    def snapshot(self) -> dict[str, Any]:
        """Everything the scheduler knows, as a JSON-able dict (for debugging endpoints)."""
        return {
            "profile": self.profile.to_dict(),
            "nodes": [self.nodes.row_dict(i) for i in range(len(self.nodes))],
            "allocations": [
                {
                    "workload_id": a.workload_id,
                    "replica": a.replica,
                    "node": a.node,
                    "priority": a.priority,
                    "kind": a.kind,
                    "assignment": a.assignment.to_dict(),
                }
                for a in self.ledger
            ],
            "queue": self.pending(),
            "unavailable_clusters": sorted(self._unavailable),
            "stats": dict(self.stats),
        }


def _with_sla_risk(plugins: PluginSet, table: SlaRiskTable) -> None:
    """``plugins``' scores use the learned SLA-miss risk (the plugins that take one)."""
    for plugin, _, _ in plugins.scorers:
        use = getattr(plugin, "use_sla_risk", None)
        if use is not None:
            use(table)


def _learned(plugins: PluginSet, estimate: InterferenceEstimate) -> None:
    """``plugins``' scores and reward use ``estimate`` (the plugins that take one)."""
    for plugin, _, _ in plugins.scorers:
        use = getattr(plugin, "use_interference", None)
        if use is not None:
            use(estimate)
    for plugin, _, _ in plugins.scorers:
        if hasattr(plugin, "reward_config"):
            plugins.reward_config = plugin.reward_config
