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
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from edgeplane_contract.mig import MIG_SPECS
from edgeplane_contract.objective import (
    NodeSnapshot,
    RewardBreakdown,
    RewardConfig,
    energy_weight,
    reward,
)
from edgeplane_contract.power import PowerModel
from edgeplane_contract.resources import ResourceRequest

from controlplane.errors import ConfigError
from controlplane.federation.config import FederationConfig
from controlplane.federation.placement import ClusterAggregate, ClusterPlan, plan_clusters
from controlplane.scheduling.actions import ActionSpace, Candidates, NodeActions
from controlplane.scheduling.framework import (
    MAX_NODE_SCORE,
    STATE_ACTIONS,
    STATE_EXCLUDED,
    STATE_NOW,
    STATE_REPLICA,
    BindPlugin,
    BoolArray,
    Code,
    CycleState,
    FilterPlugin,
    FloatArray,
    Plugin,
    PostFilterPlugin,
    PreFilterPlugin,
    Rejection,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
    Status,
    clip,
)
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import (
    Affinity,
    AntiAffinity,
    Assignment,
    Decision,
    GpuDevice,
    Migration,
    NodeState,
    ReplicaPlacement,
    Victim,
    WorkloadRequest,
)
from controlplane.scheduling.nodetable import NodeTable
from controlplane.scheduling.plugins.data_locality import transfer_seconds
from controlplane.scheduling.plugins.energy import Energy
from controlplane.scheduling.plugins.multi_objective import STATE_TERMS, MultiObjective
from controlplane.scheduling.plugins.registry import REGISTRY
from controlplane.scheduling.profiles import Profile, load_profile
from controlplane.scheduling.queue import SchedulingQueue
from controlplane.scheduling.topology import TopologyGraph

__all__ = [
    "Affinity",
    "AntiAffinity",
    "Assignment",
    "Decision",
    "GpuDevice",
    "NodeState",
    "ReplicaPlacement",
    "Scheduler",
    "Victim",
    "WorkloadRequest",
]

_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@dataclass(slots=True)
class _Cycle:
    """The result of one scheduling cycle for one replica."""

    status: Status
    state: CycleState
    row: int = -1
    assignment: Assignment | None = None
    unresolvable: BoolArray | None = None
    explanation: dict[str, Any] | None = None


@dataclass(slots=True)
class _Undo:
    """What a ``schedule`` call changed, so a failed gang can be rolled back."""

    placed: list[tuple[str, int]]
    evicted: list[Allocation]
    moved: list[list[tuple[str, int, Assignment]]]


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
    ) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
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
        self._rng = random.Random(seed)
        self._space = ActionSpace(self.profile.action_space)
        self._epoch = 0
        self._next_start = 0
        self._unavailable: set[str] = set()
        self._zone_meta: dict[int, tuple[str, str]] = {}
        self.stats = {"cycles": 0, "scheduled": 0, "unschedulable": 0, "preemptions": 0, "merges": 0}
        self._build_plugins()

    # -- plugins ---------------------------------------------------------------------------

    def _build_plugins(self) -> None:
        self._pre_filters: list[PreFilterPlugin] = []
        self._filters: list[FilterPlugin] = []
        self._post_filters: list[PostFilterPlugin] = []
        self._scorers: list[tuple[ScorePlugin, float, ScoreNormalizer | None]] = []
        self._reservers: list[ReservePlugin] = []
        self._binders: list[BindPlugin] = []
        self._reward_config = RewardConfig()
        self._energy_rule: RewardConfig | None = None
        names = set()
        for i, spec in enumerate(self.profile.plugins):
            args = dict(spec.args)
            if spec.name == "MultiObjective" and "reward" not in args:
                args["reward"] = dict(self.profile.reward)
            try:
                plugin: Plugin = REGISTRY[spec.name](args, self)
            except (TypeError, ValueError) as exc:
                raise ConfigError(self.profile.source, f"plugins[{i}].args", str(exc)) from None
            names.add(spec.name)
            if isinstance(plugin, MultiObjective):
                self._reward_config = plugin.config
                if plugin.config.adaptive.enabled:
                    self._energy_rule = plugin.config
            if isinstance(plugin, Energy) and plugin.rule.adaptive.enabled:
                self._energy_rule = plugin.rule
            if isinstance(plugin, PreFilterPlugin):
                self._pre_filters.append(plugin)
            if isinstance(plugin, FilterPlugin):
                self._filters.append(plugin)
            if isinstance(plugin, PostFilterPlugin):
                self._post_filters.append(plugin)
            if isinstance(plugin, ScorePlugin):
                # Protocol isinstance checks are slow; decide once whether it normalises.
                normalizer = plugin if isinstance(plugin, ScoreNormalizer) else None
                self._scorers.append((plugin, spec.weight, normalizer))
            if isinstance(plugin, ReservePlugin):
                self._reservers.append(plugin)
            if isinstance(plugin, BindPlugin):
                self._binders.append(plugin)
        # Resource masking is not optional: without the plugin the core still applies it.
        self._fit_builtin = "NodeResourcesFit" not in names

    @property
    def battery_aware(self) -> bool:
        """Whether this profile raises the energy weight on battery (an adaptive rule is on)."""
        return self._energy_rule is not None

    def energy_weights(self, names: Sequence[str]) -> FloatArray:
        """The energy weight ``w3`` of each named node under this profile's rule, from the node's
        last reported power source and charge (the configured ``w3`` for every node when the
        profile has no adaptive rule). Unknown names get the configured ``w3``."""
        rule = self._energy_rule or self._reward_config
        base = rule.weights.energy
        rows = np.array([self.nodes.index.get(n, -1) for n in names], dtype=np.int64)
        known = rows >= 0
        result = np.full(len(rows), base, dtype=np.float64)
        if self._energy_rule is not None and known.any():
            r = rows[known]
            result[known] = energy_weight(
                self._energy_rule, self.nodes.on_battery[r].astype(np.float64), self.nodes.battery_pct[r]
            )
        return result

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
            self.topology.set_zones(
                list(zones),
                [self._zone_meta.get(z, ("", ""))[0] for z in range(len(zones))],
                [self._zone_meta.get(z, ("", ""))[1] for z in range(len(zones))],
            )
        if grew:
            self._grew([row])

    def remove_node(self, name: str) -> list[tuple[str, int]]:
        """Forget a node; returns the (workload, replica) pairs that were running on it."""
        if name not in self.nodes.index:
            return []
        lost = self.ledger.drop_node(name)
        self.nodes.remove(name)
        self._next_start = 0
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

    # -- the cycle -------------------------------------------------------------------------

    def _rejections(
        self, state: CycleState, request: WorkloadRequest, actions: NodeActions, restrict: BoolArray | None
    ) -> list[tuple[str, Rejection]]:
        t = self.nodes
        out: list[tuple[str, Rejection]] = []
        if self._unavailable:
            ids = [t.clusters.ids[c] for c in self._unavailable if c in t.clusters.ids]
            out.append(
                ("Federation", Rejection(np.isin(t.cluster, ids), "cluster unavailable", _UNRESOLVABLE))
            )
        if restrict is not None:
            out.append(
                (
                    "ClusterPlacement",
                    Rejection(~restrict, "node(s) not in the planned cluster", _UNRESOLVABLE),
                )
            )
        if self._fit_builtin:
            out.extend(("NodeResourcesFit", r) for r in actions.rejections)
        for plugin in self._filters:
            out.extend((plugin.name, r) for r in plugin.filter(state, request, t))
        return out

    def _sample(self, feasible: np.ndarray, n: int) -> np.ndarray:
        """kube-scheduler's percentageOfNodesToScore with a rotating start index."""
        pct = self.profile.percentage_of_nodes_to_score
        if pct == 100 or n < 100:
            return feasible
        if pct == 0:
            pct = max(5, 50 - n // 125)
        limit = max(100, n * pct // 100)
        start = self._next_start % n
        if len(feasible) <= limit:
            self._next_start = start  # visited every node: the index wraps to where it was
            return feasible
        order = np.concatenate([feasible[feasible >= start], feasible[feasible < start]])
        chosen = order[:limit]
        processed = int((chosen[-1] - start) % n) + 1
        self._next_start = (start + processed) % n
        return chosen

    def _select(self, total: FloatArray) -> int:
        best = float(total.max())
        ties = np.flatnonzero(total >= best)
        if len(ties) == 1 or self.profile.tie_break == "first":
            return int(ties[0])
        return int(ties[self._rng.randrange(len(ties))])

    def _cycle(
        self, request: WorkloadRequest, replica: int, restrict: BoolArray | None, explain: bool
    ) -> _Cycle:
        self.stats["cycles"] += 1
        t = self.nodes
        n = len(t)
        state = CycleState()
        state.write(STATE_NOW, self._clock())
        state.write(STATE_REPLICA, replica)
        for pre in self._pre_filters:
            status = pre.pre_filter(state, request, t)
            if not status.ok:
                return _Cycle(
                    status=replace(status, plugin=status.plugin or pre.name),
                    state=state,
                    unresolvable=np.ones(n, dtype=bool),
                )
        actions = self._space.analyse(t, request.resources)
        state.write(STATE_ACTIONS, actions)
        rejections = self._rejections(state, request, actions, restrict)
        rejected = np.zeros(n, dtype=bool)
        unresolvable = np.zeros(n, dtype=bool)
        first = np.full(n, -1, dtype=np.int64)
        for k, (_, rej) in enumerate(rejections):
            fresh = rej.mask & ~rejected
            first[fresh] = k
            rejected |= rej.mask
            if rej.code == _UNRESOLVABLE:
                unresolvable |= rej.mask
        feasible = np.flatnonzero(~rejected)
        report = self._mask_report(actions, rejections, first, rejected, feasible)
        if len(feasible) == 0:
            node_counts = np.bincount(first[rejected], minlength=len(rejections)) if n else np.zeros(0)
            parts = [f"{int(c)} {rejections[k][1].reason}" for k, c in enumerate(node_counts) if c]
            message = f"0/{n} nodes are available" + (": " + ", ".join(parts) if parts else "")
            code = Code.UNSCHEDULABLE if (~unresolvable).any() else _UNRESOLVABLE
            expl = (
                {"replica": replica, "actions": report, "status": code.name, "reason": message}
                if explain
                else None
            )
            return _Cycle(
                status=Status(code, (message,)), state=state, unresolvable=unresolvable, explanation=expl
            )
        rows = self._sample(feasible, n)
        cand = self._space.candidates(t, request.resources, actions, rows)
        total = np.zeros(len(cand))
        per_plugin: list[tuple[str, float, FloatArray, FloatArray]] = []
        for plugin, weight, normalizer in self._scorers:
            raw = plugin.score(state, request, cand)
            if normalizer is not None:
                norm = normalizer.normalize(state, raw)
            else:
                norm = clip(raw, 0.0, MAX_NODE_SCORE)
            total += weight * norm
            per_plugin.append((plugin.name, weight, raw, norm))
        ranking = total
        excluded = state.get(STATE_EXCLUDED)
        if excluded is not None and excluded.any() and not excluded.all():
            ranking = np.where(excluded, -np.inf, total)
        best = self._select(ranking)
        assignment = cand.assignment(best, t)
        expl = None
        if explain:
            expl = self._explain(
                replica, report, cand, total, per_plugin, best, assignment, state, len(feasible), ranking
            )
        return _Cycle(
            status=Status.success(),
            state=state,
            row=int(rows[best]),
            assignment=assignment,
            unresolvable=unresolvable,
            explanation=expl,
        )

    def _mask_report(
        self,
        actions: NodeActions,
        rejections: list[tuple[str, Rejection]],
        first: np.ndarray,
        rejected: BoolArray,
        feasible: np.ndarray,
    ) -> dict[str, Any]:
        total = int(actions.total.sum())
        remaining = int(actions.feasible[feasible].sum())
        by: dict[str, int] = {}
        if rejected.any():
            sums = np.bincount(first[rejected], weights=actions.total[rejected], minlength=len(rejections))
            for k, value in enumerate(sums):
                if value:
                    name, rej = rejections[k]
                    key = f"{name}: {rej.reason}"
                    by[key] = by.get(key, 0) + int(value)
        partial = int((actions.total[feasible] - actions.feasible[feasible]).sum())
        if partial:
            by["NodeResourcesFit: infeasible quota/accelerator options on feasible nodes"] = partial
        return {"total": total, "masked": total - remaining, "remaining": remaining, "masked_by": by}

    def _explain(
        self,
        replica: int,
        report: dict[str, Any],
        cand: Candidates,
        total: FloatArray,
        per_plugin: list[tuple[str, float, FloatArray, FloatArray]],
        best: int,
        assignment: Assignment,
        state: CycleState,
        feasible_nodes: int,
        ranking: FloatArray,
    ) -> dict[str, Any]:
        t = self.nodes
        k = min(self.explain_top + 1, len(ranking))
        top = np.argpartition(-ranking, k - 1)[:k] if k < len(ranking) else np.arange(len(ranking))
        top = top[np.argsort(-ranking[top], kind="stable")]
        # Alternatives are nodes that could have been chosen (not excluded ones).
        order = [best, *[int(i) for i in top if int(i) != best and ranking[i] > -np.inf][: self.explain_top]]
        terms = state.get(STATE_TERMS)

        def entry(k: int) -> dict[str, Any]:
            row = int(cand.rows[k])
            item: dict[str, Any] = {
                "node": t.names[row],
                "cluster": t.states[row].cluster,
                "score": float(total[k]),
                "assignment": (assignment if k == best else cand.assignment(k, t)).to_dict(),
                "plugins": {
                    name: {"raw": float(raw[k]), "normalized": float(norm[k]), "weight": weight}
                    for name, weight, raw, norm in per_plugin
                },
            }
            if terms is not None:
                item["reward"] = {
                    "total": float(terms.total[k]),
                    "R_util": float(terms.util[k]),
                    "R_qos": float(terms.qos[k]),
                    "R_energy": float(terms.energy[k]),
                    "R_penalty": float(terms.penalty[k]),
                    "w3_effective": float(terms.w_energy[k]),
                    "predicted_latency_s": float(terms.predicted_latency_s[k]),
                }
            return item

        return {
            "replica": replica,
            "actions": report,
            "nodes": {"total": len(t), "feasible": feasible_nodes, "scored": len(cand)},
            "chosen": entry(order[0]),
            "alternatives": [entry(k) for k in order[1:]],
        }

    # -- reserve / bind --------------------------------------------------------------------

    def _commit(self, request: WorkloadRequest, replica: int, cycle: _Cycle) -> Status:
        assert cycle.assignment is not None
        row = cycle.row
        alloc = Allocation(
            workload_id=request.id,
            replica=replica,
            node=self.nodes.names[row],
            assignment=cycle.assignment,
            priority=request.priority,
            kind=request.kind,
            request=request,
        )
        self.ledger.add(alloc)
        done: list[ReservePlugin] = []
        for plugin in self._reservers:
            status = plugin.reserve(cycle.state, request, replica, row, cycle.assignment)
            if not status.ok:
                for undo in reversed(done):
                    undo.unreserve(cycle.state, request, replica, row, cycle.assignment)
                self.ledger.remove(request.id, replica)
                return status
            done.append(plugin)
        for binder in self._binders:
            status = binder.bind(cycle.state, request, replica, row, cycle.assignment)
            if status.code == Code.SKIP:
                continue
            if not status.ok:
                for undo in reversed(done):
                    undo.unreserve(cycle.state, request, replica, row, cycle.assignment)
                self.ledger.remove(request.id, replica)
                return status
            break
        return Status.success()

    # -- placing replicas ------------------------------------------------------------------

    def _cluster_mask(self, cluster: str) -> BoolArray | None:
        cid = self.nodes.clusters.ids.get(cluster)
        if cid is None:
            return None
        mask: BoolArray = self.nodes.cluster == cid
        return mask

    def aggregates(self) -> dict[str, ClusterAggregate]:
        """Free capacity per cluster over ready nodes (the input of cluster-level placement)."""
        t = self.nodes
        out: dict[str, ClusterAggregate] = {}
        if not len(t):
            return out
        k = len(t.clusters.names)
        ready = t.ready.astype(np.float64)

        def per(values: np.ndarray) -> np.ndarray:
            return np.bincount(t.cluster, weights=values * ready, minlength=k)

        nodes = per(np.ones(len(t)))
        cpu_free = per(t.cpu_cap - t.cpu_alloc)
        mem_free = per(t.mem_cap - t.mem_alloc)
        gpus = per(t.free_whole_gpus().astype(np.float64))
        mig = per(((7 - t.mig_comp) * t.mig_gpu).sum(axis=1).astype(np.float64))
        dpus = per(t.dpu_free().astype(np.float64))
        cap = per(t.cpu_cap)
        regions: dict[int, str] = {}
        for row in range(len(t)):
            regions.setdefault(int(t.cluster[row]), t.states[row].region)
        for cid, name in enumerate(t.clusters.names):
            out[name] = ClusterAggregate(
                name=name,
                region=regions.get(cid, ""),
                ready_nodes=int(nodes[cid]),
                cpu_free=float(cpu_free[cid]),
                memory_free=float(mem_free[cid]),
                gpus_free=int(gpus[cid]),
                mig_compute_free=int(mig[cid]),
                dpus_free=int(dpus[cid]),
                cpu_capacity=float(cap[cid]),
            )
        return out

    def _origin_region(self, request: WorkloadRequest) -> str | None:
        loc = request.data_location
        if loc is None:
            return None
        row = self.nodes.index.get(loc)
        if row is not None:
            return self.nodes.states[row].region
        return loc

    def _plan(self, request: WorkloadRequest, count: int) -> ClusterPlan | None:
        fed = self.federation
        if fed is None or len(fed.clusters) < 2:
            return None
        return plan_clusters(
            resources=request.resources,
            replicas=count,
            federation=fed,
            aggregates=self.aggregates(),
            clusters=request.affinity.clusters,
            regions=request.affinity.regions,
            avoid_clusters=request.anti_affinity.clusters,
            avoid_regions=request.anti_affinity.regions,
            unavailable=self._unavailable,
            origin_region=self._origin_region(request),
        )

    def _post_filter(
        self,
        request: WorkloadRequest,
        replica: int,
        restrict: BoolArray | None,
        cycle: _Cycle,
        undo: _Undo,
        explain: bool,
    ) -> tuple[_Cycle, dict[str, Any] | None, list[Victim], list[Migration]]:
        """Run post-filters (merge, preemption) after a failed cycle; retry the cycle once each."""
        unresolvable = (
            cycle.unresolvable if cycle.unresolvable is not None else np.zeros(len(self.nodes), bool)
        )
        if restrict is not None:
            unresolvable = unresolvable | ~restrict
        for plugin in self._post_filters:
            result = plugin.post_filter(cycle.state, request, self.nodes, unresolvable)
            if not result.status.ok or result.node is None:
                continue
            evicted: list[Allocation] = []
            for victim in result.victims:
                alloc = self.ledger.remove(victim.workload_id, victim.replica)
                if alloc is not None:
                    evicted.append(alloc)
            changes = [(m.workload_id, m.replica, m.new) for m in result.migrations]
            if changes:
                self.ledger.move(changes)
            retry = self._cycle(request, replica, restrict, explain)
            if retry.status.ok:
                undo.evicted.extend(evicted)
                if changes:
                    undo.moved.append([(m.workload_id, m.replica, m.old) for m in result.migrations])
                if result.victims:
                    self.stats["preemptions"] += 1
                if result.migrations:
                    self.stats["merges"] += 1
                info = {
                    "plugin": plugin.name,
                    "node": self.nodes.names[result.node],
                    "victims": [v.to_dict() for v in result.victims],
                    "migrations": [m.to_dict() for m in result.migrations],
                }
                return retry, info, list(result.victims), list(result.migrations)
            # The retry failed after all: put things back as they were.
            if changes:
                self.ledger.move([(m.workload_id, m.replica, m.old) for m in result.migrations])
            for alloc in evicted:
                self.ledger.add(alloc)
        return cycle, None, [], []

    def _place(self, request: WorkloadRequest, replicas: list[int], explain: bool) -> Decision:
        """Place the given replicas of a workload (all-or-nothing when it is a gang)."""
        undo = _Undo([], [], [])
        plan = self._plan(request, len(replicas))
        placements: list[ReplicaPlacement] = []
        explanations: list[dict[str, Any]] = []
        victims: list[Victim] = []
        migrations: list[Migration] = []
        reasons: list[str] = []
        codes: list[Code] = []
        for k, replica in enumerate(replicas):
            targets: list[str | None]
            if plan is None:
                targets = [None]
            elif plan.ok:
                first = plan.assignments[k]
                targets = [first, *(c for c in plan.ranking if c != first)]
            else:
                targets = []
                reasons.append(plan.reason or "no cluster")
            cycle: _Cycle | None = None
            post: dict[str, Any] | None = None
            for cluster in targets:
                restrict = self._cluster_mask(cluster) if cluster is not None else None
                if cluster is not None and restrict is None:
                    continue
                cycle = self._cycle(request, replica, restrict, explain)
                if not cycle.status.ok and cycle.status.code == Code.UNSCHEDULABLE and self._post_filters:
                    cycle, post, vs, ms = self._post_filter(request, replica, restrict, cycle, undo, explain)
                    victims.extend(vs)
                    migrations.extend(ms)
                if cycle.status.ok:
                    break
            status = (
                cycle.status
                if cycle is not None
                else Status(_UNRESOLVABLE, (reasons[-1] if reasons else "no cluster",))
            )
            if cycle is not None and status.ok:
                status = self._commit(request, replica, cycle)
            if cycle is not None and cycle.explanation is not None:
                if post is not None:
                    cycle.explanation["post_filter"] = post
                explanations.append(cycle.explanation)
            if status.ok and cycle is not None and cycle.assignment is not None:
                node = self.nodes.names[cycle.row]
                undo.placed.append((request.id, replica))
                placements.append(
                    ReplicaPlacement(replica, node, self.nodes.states[cycle.row].cluster, cycle.assignment)
                )
            else:
                placements.append(ReplicaPlacement(replica, reason=status.message()))
                reasons.append(status.message())
                codes.append(status.code)
                if request.gang:
                    break
        failed = [p for p in placements if not p.placed]
        if request.gang and failed:
            self._rollback(undo)
            victims, migrations = [], []
            placements = [ReplicaPlacement(r, reason=f"gang: {failed[0].reason}") for r in replicas]
        if failed:
            code = Code.UNSCHEDULABLE if Code.UNSCHEDULABLE in codes or not codes else codes[0]
            overall = Status(code, tuple(dict.fromkeys(reasons)))
            self.stats["unschedulable"] += 1
        else:
            overall = Status.success()
            self.stats["scheduled"] += 1
        explanation: dict[str, Any] = {}
        if explain:
            explanation = {
                "profile": self.profile.name,
                "workload": request.id,
                "gang": request.gang,
                "cluster_plan": plan.to_dict() if plan is not None else None,
                "replicas": explanations,
            }
        return Decision(
            workload_id=request.id,
            status=overall,
            placements=placements,
            victims=victims,
            migrations=migrations,
            explanation=explanation,
        )

    def _rollback(self, undo: _Undo) -> None:
        for wid, replica in reversed(undo.placed):
            self.ledger.remove(wid, replica)
        for changes in reversed(undo.moved):
            self.ledger.move(changes)
        for alloc in undo.evicted:
            self.ledger.add(alloc)

    # -- public scheduling API -------------------------------------------------------------

    def schedule(
        self,
        request: WorkloadRequest,
        *,
        replicas: Iterable[int] | None = None,
        enqueue: bool = True,
        explain: bool = True,
    ) -> Decision:
        """Place every replica of ``request`` not placed yet (all or none for a gang).

        ``replicas`` limits the call to those replica indices (e.g. one whose node died).
        Replicas that fit nowhere (even after preemption / fragment merge) wait in the queue when
        ``enqueue`` and are retried by :meth:`schedule_pending` once capacity frees.
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
        decision = self._place(request, todo, explain)
        missing = [p.replica for p in decision.placements if not p.placed]
        if missing and enqueue:
            self.queue.push(
                request, missing, epoch=self._epoch, reason=decision.status.message(), now=self._clock()
            )
            decision.queued = True
        else:
            self.queue.discard(request.id, [p.replica for p in decision.placements if p.placed])
        return decision

    def schedule_pending(self, *, limit: int | None = None, explain: bool = True) -> list[Decision]:
        """Retry waiting workloads (highest priority first) that capacity changes may now fit.

        A waiting workload is retried only if some node whose free capacity grew since its last
        attempt could hold one of its replicas (the others only lost capacity since), or, at most
        every ``preemption_retry_s``, if it could preempt. Returns the decisions that placed at
        least one replica; the rest keep waiting.
        """
        out: list[Decision] = []
        tried = 0
        now = self._clock()
        for entry in self.queue.ordered():
            if entry.epoch >= self._epoch:
                continue
            if limit is not None and tried >= limit:
                break
            grown = self.nodes.freed_at > entry.epoch
            if not self._may_fit(entry.request.resources, grown):
                if not (
                    self._may_preempt(entry.request)
                    and now - entry.last_attempt_at >= self.preemption_retry_s
                ):
                    entry.epoch = self._epoch
                    continue
            tried += 1
            entry.attempts += 1
            attempt_epoch = self._epoch
            decision = self._place(entry.request, list(entry.replicas), explain)
            still = [p.replica for p in decision.placements if not p.placed]
            if still:
                entry.replicas = still
                entry.epoch = attempt_epoch
                entry.last_reason = decision.status.message()
                entry.last_attempt_at = now
            else:
                self.queue.remove(entry.request.id)
            if len(still) < len(decision.placements):
                decision.queued = bool(still)
                out.append(decision)
        return out

    def _may_fit(self, res: ResourceRequest, rows: BoolArray | None = None) -> bool:
        """Cheap necessary condition: some (given) ready node has the free CPU, memory, devices."""
        t = self.nodes
        ok = (
            t.ready
            & (t.cpu_cap - t.cpu_alloc + 1e-9 >= res.cpu)
            & (t.mem_cap - t.mem_alloc + 1e-9 >= res.memory)
        )
        if rows is not None:
            ok &= rows
        if res.gpu:
            ok &= t.free_whole_gpus() >= res.gpu
        if res.dpu:
            ok &= t.dpu_free() >= res.dpu
        if res.mig:
            # Node-level total: a fragment merge can gather free slices onto one GPU.
            need = sum(MIG_SPECS[p].compute for p in res.mig)
            ok &= ((7 - t.mig_comp) * t.mig_gpu).sum(axis=1) >= need
        return bool(ok.any())

    def _may_preempt(self, request: WorkloadRequest) -> bool:
        lowest = self.ledger.min_priority()
        return (
            bool(self._post_filters)
            and request.preemption_policy != "Never"
            and lowest is not None
            and request.priority > lowest
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
            request = allocs[0].request or _request_from(allocs[0])
            # No anti-affinity rewrite: the unavailable set keeps the cluster out, and a replica
            # left waiting may return there once the cluster is back.
            replicas = sorted(a.replica for a in allocs)
            decision = self._place(request, replicas, explain)
            missing = [p.replica for p in decision.placements if not p.placed]
            if missing:
                self.queue.push(
                    request, missing, epoch=self._epoch, reason=decision.status.message(), now=self._clock()
                )
                decision.queued = True
            decision.explanation["failover_from"] = sorted(down)
            decisions.append(decision)
        self._grew(freed_rows)
        return decisions

    # -- RL / debugging --------------------------------------------------------------------

    def reward_of(self, request: WorkloadRequest, node: str, assignment: Assignment) -> RewardBreakdown:
        """The reward R of placing ``assignment`` of ``request`` on ``node`` now (for trainers)."""
        t = self.nodes
        row = t.index[node]
        node_type = t.node_type[row : row + 1]
        gpus = t.gpu_count[row : row + 1]
        dpus = t.dpu_count[row : row + 1]
        spec = self.power.spec(t.states[row].node_type)
        gpu_units = (
            float(len(assignment.gpus)) + sum(MIG_SPECS[s.profile].compute for s in assignment.mig) / 7.0
        )
        snapshot = NodeSnapshot(
            cpu_cap=float(t.cpu_cap[row]),
            cpu_alloc=float(t.cpu_alloc[row]),
            mem_cap=float(t.mem_cap[row]),
            mem_alloc=float(t.mem_alloc[row]),
            gpu_count=int(t.gpu_count[row]),
            gpu_used=float(t.gpu_compute_used()[row]),
            sens_sum=float(t.sens_sum[row]),
            replicas=int(t.replicas[row]),
            io_count=int(t.io_count[row]),
            idle_w=float(self.power.idle_w(node_type, gpus, dpus)[0]),
            max_w=float(self.power.max_w(node_type, gpus, dpus)[0]),
            cpu_dynamic_w_per_core=(spec.max_w - spec.idle_w) / max(float(t.cpu_cap[row]), 1e-9),
            gpu_dynamic_w_per_unit=spec.gpu_max_w - spec.gpu_idle_w,
            on_battery=bool(t.on_battery[row]),
            battery_pct=None if np.isnan(t.battery_pct[row]) else float(t.battery_pct[row]),
            transfer_s=float(transfer_seconds(self, request, np.array([row]), self._clock())[0]),
        )
        return reward(
            snapshot,
            cpu=assignment.cpu,
            memory=assignment.memory,
            gpu_units=gpu_units,
            kind=request.kind,
            runtime_s=request.expected_runtime_s,
            sla_s=request.sla_latency_s,
            cfg=self._reward_config,
        )

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


def _request_from(alloc: Allocation) -> WorkloadRequest:
    """A stand-in request for a replica recorded without one (resources from its assignment)."""
    a = alloc.assignment
    return WorkloadRequest(
        id=alloc.workload_id,
        resources=ResourceRequest(
            cpu=a.cpu, memory=a.memory, gpu=len(a.gpus), mig=[s.profile for s in a.mig], dpu=len(a.dpus)
        ),
        replicas=alloc.replica + 1,
        priority=alloc.priority,
        kind=alloc.kind,
    )
