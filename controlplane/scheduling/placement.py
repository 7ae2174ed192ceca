"""Placing the replicas of one workload: a cycle per replica in its planned cluster, PostFilter
(preemption, fragment merges) when a cycle finds nothing, commit, and all-or-nothing for gangs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from controlplane.federation.config import FederationConfig
from controlplane.scheduling.commit import Undo, commit, rollback
from controlplane.scheduling.cycle import Cycle, CycleRunner
from controlplane.scheduling.explanation import (
    DecisionScope,
    Explanation,
    PostFilterExplanation,
    ReplicaExplanation,
)
from controlplane.scheduling.federation_plan import cluster_mask, cluster_plan
from controlplane.scheduling.framework import BoolArray, Code, Status
from controlplane.scheduling.ledger import Allocation, Ledger
from controlplane.scheduling.model import Decision, Migration, ReplicaPlacement, Victim, WorkloadRequest

__all__ = ["Placer"]

_UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


class Placer:
    """Places replicas with the scheduler's cycles; ``unavailable`` and ``stats`` are shared."""

    def __init__(
        self,
        cycles: CycleRunner,
        ledger: Ledger,
        federation: FederationConfig | None,
        *,
        unavailable: set[str],
        stats: dict[str, int],
    ) -> None:
        self.cycles = cycles
        self.nodes = cycles.nodes
        self.plugins = cycles.plugins
        self.ledger = ledger
        self.federation = federation
        self.unavailable = unavailable
        self.stats = stats

    def post_filter(
        self,
        request: WorkloadRequest,
        replica: int,
        restrict: BoolArray | None,
        cycle: Cycle,
        undo: Undo,
        explain: bool,
    ) -> tuple[Cycle, PostFilterExplanation | None, list[Victim], list[Migration]]:
        """Run post-filters (merge, preemption) after a failed cycle; retry the cycle once each."""
        unresolvable = (
            cycle.unresolvable if cycle.unresolvable is not None else np.zeros(len(self.nodes), bool)
        )
        if restrict is not None:
            unresolvable = unresolvable | ~restrict
        for plugin in self.plugins.post_filters:
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
            retry = self.cycles.run(request, replica, restrict, explain)
            if retry.status.ok:
                undo.evicted.extend(evicted)
                if changes:
                    undo.moved.append([(m.workload_id, m.replica, m.old) for m in result.migrations])
                if result.victims:
                    self.stats["preemptions"] += 1
                if result.migrations:
                    self.stats["merges"] += 1
                info = PostFilterExplanation(
                    plugin=plugin.name,
                    node=self.nodes.names[result.node],
                    victims=tuple(result.victims),
                    migrations=tuple(result.migrations),
                )
                return retry, info, list(result.victims), list(result.migrations)
            # The retry failed after all: put things back as they were.
            if changes:
                self.ledger.move([(m.workload_id, m.replica, m.old) for m in result.migrations])
            for alloc in evicted:
                self.ledger.add(alloc)
        return cycle, None, [], []

    def place(self, request: WorkloadRequest, replicas: list[int], explain: bool) -> Decision:
        """Place the given replicas of a workload (all-or-nothing when it is a gang)."""
        undo = Undo()
        space = self.cycles.profile.action_space
        least = (min(space.cpu_bins), min(space.memory_bins))
        plan = cluster_plan(
            self.federation,
            self.nodes,
            request,
            len(replicas),
            self.unavailable,
            least_quota=least,
            explain=explain,
        )
        placements: list[ReplicaPlacement] = []
        explanations: list[ReplicaExplanation] = []
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
            cycle: Cycle | None = None
            post: PostFilterExplanation | None = None
            unplaced: list[tuple[BoolArray | None, Cycle]] = []
            for cluster in targets:
                restrict = cluster_mask(self.nodes, cluster) if cluster is not None else None
                if cluster is not None and restrict is None:
                    continue
                cycle = self.cycles.run(request, replica, restrict, explain)
                if cycle.status.ok:
                    break
                if cycle.status.code == Code.UNSCHEDULABLE:
                    unplaced.append((restrict, cycle))
            if cycle is not None and not cycle.status.ok and unplaced and self.plugins.post_filters:
                # No cluster of the plan has room without evicting anything: only now preempt
                # (or merge), cluster by cluster in the plan's order. Trying every cluster first
                # is what a federation is for, and it keeps the post-filters' whole-fleet work
                # off the common path (bench/federation_scale.py).
                for restrict, failed_cycle in unplaced:
                    cycle, post, vs, ms = self.post_filter(
                        request, replica, restrict, failed_cycle, undo, explain
                    )
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
                status = commit(self.ledger, self.nodes, self.plugins, request, replica, cycle)
            if cycle is not None and cycle.explanation is not None:
                explained = cycle.explanation
                if post is not None:
                    explained = replace(explained, post_filter=post)
                explanations.append(explained)
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
            rollback(self.ledger, undo)
            victims, migrations = [], []
            placements = [ReplicaPlacement(r, reason=f"gang: {failed[0].reason}") for r in replicas]
        if failed:
            code = Code.UNSCHEDULABLE if Code.UNSCHEDULABLE in codes or not codes else codes[0]
            overall = Status(code, tuple(dict.fromkeys(reasons)))
            self.stats["unschedulable"] += 1
        else:
            overall = Status.success()
            self.stats["scheduled"] += 1
        explanation = Explanation()
        if explain:
            scope = DecisionScope(self.cycles.profile.name, request.id, request.gang, plan)
            explanation = Explanation(scope, tuple(explanations))
        return Decision(
            workload_id=request.id,
            status=overall,
            placements=placements,
            victims=victims,
            migrations=migrations,
            explanation=explanation,
        )
