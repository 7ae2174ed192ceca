"""The discrete-event simulation: one scheduler, one fleet, one arrival sequence.

The simulation drives a real :class:`~controlplane.scheduling.scheduler.Scheduler` (the object
the hub uses) and models what the scheduler cannot set:

* **Runtime under contention.** Each running replica has nominal work left (seconds alone on an
  idle node, plus the time to pull its input over the true network). Its progress rate is
  ``1 / ((1 + s * c(u)) * (1 + io_penalty * other_io_heavy))`` with the node's CPU allocation
  ``u`` and the ground-truth :class:`~.presets.ContentionModel`; rates are recomputed whenever
  a node's load changes.
* **Queueing.** Work that fits nowhere waits in the scheduler's queue and is retried when
  capacity frees; latency is queueing plus running. Some classes give up after their patience.
* **Power.** Per-node-type power model (idle + dynamic by utilisation) integrated over time; a
  power manager (the same for every scheduler) suspends nodes idle for a while when the pool
  keeps its reserve, and wakes them (after ``wake_s``) when work waits or the reserve runs low.
* **Batteries.** Solar + battery nodes draw from the battery at night, charge by day, and die
  (killing their replicas) when it runs out.
* **Preemption and fragment merges** decided by the scheduler are carried out: victims lose
  their progress and are resubmitted; moved MIG replicas restart with a start-up cost.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgeplane_contract.power import DEFAULT_POWER_SPECS, PowerSpec

from controlplane.scheduling.model import Assignment, Decision, GpuDevice, NodeState
from controlplane.scheduling.nodetable import ZONE_LABEL
from controlplane.scheduling.scheduler import Scheduler
from controlplane.scheduling.topology import TopologyGraph
from controlplane.sim.network import Network, NodePlace
from controlplane.sim.presets import GB, Preset
from controlplane.sim.workload import TaskSpec

__all__ = ["RunRecord", "Simulation"]

_ARRIVE, _FINISH, _GIVEUP, _WAKE, _TICK, _END = range(6)
_MIG_COMPUTE = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}


class _Node:
    __slots__ = (
        "battery_cap",
        "battery_drawn_wh",
        "battery_wh",
        "cap_cpu_t",
        "cap_mem_t",
        "charge_w",
        "cpu",
        "cpu_alloc",
        "dead_events",
        "dpus",
        "dpus_busy",
        "energy_j",
        "gpu_t",
        "gpu_units",
        "gpus",
        "group",
        "has_battery",
        "idle_since",
        "index",
        "io_count",
        "last_t",
        "mem",
        "mem_alloc",
        "mig_gpus",
        "min_battery_pct",
        "name",
        "node_type",
        "on_battery",
        "power_w",
        "replicas",
        "spec",
        "state",
        "template",
        "used_cpu_t",
        "used_mem_t",
        "wake_at",
        "whole_gpus",
    )

    def __init__(self, index: int, template: NodeState, spec: PowerSpec, group: str) -> None:
        self.index = index
        self.name = template.name
        self.template = template
        self.node_type = template.node_type
        self.group = group
        self.spec = spec
        self.cpu = template.cpu
        self.mem = float(template.memory)
        self.gpus = len(template.gpus)
        self.mig_gpus = sum(1 for g in template.gpus if g.mig_enabled)
        self.whole_gpus = self.gpus - self.mig_gpus
        self.dpus = template.dpus
        self.state = "on"
        self.idle_since = 0.0
        self.replicas: dict[tuple[str, int], _Replica] = {}
        self.cpu_alloc = 0.0
        self.mem_alloc = 0.0
        self.gpu_units = 0.0
        self.dpus_busy = 0
        self.io_count = 0
        self.last_t = 0.0
        self.power_w = 0.0
        self.energy_j = 0.0
        self.used_cpu_t = 0.0
        self.used_mem_t = 0.0
        self.cap_cpu_t = 0.0
        self.cap_mem_t = 0.0
        self.gpu_t = 0.0
        self.has_battery = False
        self.on_battery = False
        self.battery_cap = 0.0
        self.battery_wh = 0.0
        self.charge_w = 0.0
        self.dead_events = 0
        self.wake_at = 0.0
        self.min_battery_pct = 100.0
        self.battery_drawn_wh = 0.0


class _Replica:
    __slots__ = (
        "assignment",
        "index",
        "io",
        "last",
        "node",
        "rate",
        "sens",
        "started",
        "task",
        "version",
        "work_left",
    )

    def __init__(
        self,
        task: _Task,
        index: int,
        node: _Node,
        assignment: Assignment,
        work: float,
        sens: float,
        io: bool,
        now: float,
    ) -> None:
        self.task = task
        self.index = index
        self.node = node
        self.assignment = assignment
        self.work_left = work
        self.rate = 1.0
        self.last = now
        self.version = 0
        self.sens = sens
        self.io = io
        self.started = now


class _Task:
    __slots__ = ("done_at", "dropped", "finished", "full_start", "placed", "resolved", "restarts", "spec")

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.placed: dict[int, _Replica] = {}
        self.finished: set[int] = set()
        self.done_at: float | None = None
        self.dropped = False
        self.full_start: float | None = None
        self.restarts = 0
        self.resolved = False


@dataclass(slots=True)
class RunRecord:
    """Raw outcome of one run, turned into the reported metrics by :mod:`.metrics`."""

    scheduler: str
    window_s: float
    nodes: int
    total_gpus: int
    energy_j: float
    used_cpu_t: float
    used_mem_t: float
    cap_cpu_t: float
    cap_mem_t: float
    fleet_cpu_t: float
    fleet_mem_t: float
    gpu_t: float
    tasks: list[dict[str, Any]] = field(default_factory=list)
    decision_ms: list[float] = field(default_factory=list)
    decision_time_s: float = 0.0
    pending_time_s: float = 0.0
    pending_calls: int = 0
    preemptions: int = 0
    merges: int = 0
    sleeps: int = 0
    wakes: int = 0
    battery_deaths: int = 0
    battery_nodes: int = 0
    depleted_batteries: int = 0
    min_battery_pct: float | None = None
    battery_drawn_wh: float = 0.0
    unfinished: int = 0
    wall_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)


class Simulation:
    """One run of one scheduler over a preset and a fixed arrival sequence."""

    def __init__(
        self,
        preset: Preset,
        tasks: list[TaskSpec],
        *,
        scheduler_name: str,
        profile: str | dict[str, Any],
        hours: float,
        seed: int,
        progress: Callable[[str, float, float], None] | None = None,
    ) -> None:
        self.preset = preset
        self.hours = hours
        self.seed = seed
        self.name = scheduler_name
        self.now = 0.0
        self.window = (preset.warmup_s, preset.warmup_s + hours * 3600.0)
        self.progress = progress
        fed = preset.federation
        self.sched = Scheduler(
            profile,
            fed,
            seed=seed,
            clock=lambda: self.now,
            topology=TopologyGraph(
                window_s=300.0,
                refresh_s=5.0,
                region_latency_ms=fed.latency_between if fed is not None else None,
            ),
        )
        self.rng = np.random.default_rng([seed, 7])
        self.nodes: list[_Node] = []
        self.by_name: dict[str, _Node] = {}
        places: list[NodePlace] = []
        for group in preset.groups:
            batteries = round(group.count * group.battery_fraction)
            for k in range(group.count):
                name = f"{group.prefix}-{k:03d}"
                zone = f"{group.cluster}/{group.prefix}-r{k // group.rack_size}"
                template = NodeState(
                    name=name,
                    cluster=group.cluster,
                    region=group.region,
                    labels={ZONE_LABEL: zone, "edgeplane.io/pool": group.prefix},
                    cpu=group.cpu,
                    memory=int(group.memory_gb * GB),
                    gpus=[GpuDevice(i, mig_enabled=i < group.mig_gpus) for i in range(group.gpus)],
                    dpus=group.dpus,
                    node_type=group.node_type,
                )
                node = _Node(len(self.nodes), template, DEFAULT_POWER_SPECS[group.node_type], group.prefix)
                # Spread battery nodes through the group (every other one for a half).
                if batteries and (k * batteries) // group.count != ((k + 1) * batteries) // group.count:
                    node.has_battery = True
                    node.battery_cap = group.battery_wh
                    node.battery_wh = 0.8 * group.battery_wh
                    node.charge_w = group.charge_w
                self.nodes.append(node)
                self.by_name[name] = node
                self.sched.upsert_node(template)
                places.append(NodePlace(self.sched.nodes.zones.ids[zone], group.cluster, group.region))
        self.network = Network(
            places, fed, np.random.default_rng([seed, 11]), congested_fraction=preset.congested_link_fraction
        )
        self.tasks = {spec.id: _Task(spec) for spec in tasks}
        self.order = [self.tasks[spec.id] for spec in tasks]
        self.measured_total = sum(1 for spec in tasks if spec.measured)
        self.measured_resolved = 0
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.sens = dict(preset.contention.sensitivity)
        self.record = RunRecord(
            scheduler=scheduler_name,
            window_s=self.window[1] - self.window[0],
            nodes=len(self.nodes),
            total_gpus=sum(n.gpus for n in self.nodes),
            energy_j=0.0,
            used_cpu_t=0.0,
            used_mem_t=0.0,
            cap_cpu_t=0.0,
            cap_mem_t=0.0,
            fleet_cpu_t=sum(n.cpu for n in self.nodes) * (self.window[1] - self.window[0]),
            fleet_mem_t=sum(n.mem for n in self.nodes) * (self.window[1] - self.window[0]),
            gpu_t=0.0,
        )
        for node in self.nodes:
            self._update_battery_flag(node, 0.0)
            self._repower(node)

    # -- event plumbing --------------------------------------------------------------------

    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    def run(self) -> RunRecord:
        started = time.perf_counter()
        for task in self.order:
            self._push(task.spec.arrival_s, _ARRIVE, task)
        self._push(0.0, _TICK, None)
        self._push(self.window[1], _END, None)
        stop_at = self.window[1] + self.preset.drain_s
        last_report = 0.0
        arrivals_done = False
        while self.heap:
            t, _, kind, payload = heapq.heappop(self.heap)
            if t > stop_at:
                break
            self.now = t
            if kind == _FINISH:
                self._on_finish(payload)
            elif kind == _ARRIVE:
                self._on_arrive(payload)
            elif kind == _TICK:
                self._on_tick()
                if not (arrivals_done and self.measured_resolved >= self.measured_total):
                    self._push(t + self.preset.power_manager.tick_s, _TICK, None)
            elif kind == _GIVEUP:
                self._on_giveup(payload)
            elif kind == _WAKE:
                self._on_wake(payload)
            elif kind == _END:
                arrivals_done = True
                for node in self.nodes:
                    self._advance(node, t)
            if arrivals_done and self.measured_resolved >= self.measured_total:
                break
            if self.progress is not None and t - last_report >= 3600.0:
                last_report = t
                self.progress(self.name, t, self.window[1])
        for node in self.nodes:
            self._advance(node, min(self.now, self.window[1]))
        self._finalise(time.perf_counter() - started)
        return self.record

    # -- node physics ----------------------------------------------------------------------

    def _advance(self, node: _Node, now: float) -> None:
        dt = now - node.last_t
        if dt <= 0:
            return
        if node.has_battery:
            if node.on_battery and node.state != "dead":
                drawn = node.power_w * dt / 3600.0
                node.battery_wh -= drawn
                node.battery_drawn_wh += drawn
            elif not node.on_battery:
                node.battery_wh = min(node.battery_cap, node.battery_wh + node.charge_w * dt / 3600.0)
            node.min_battery_pct = min(node.min_battery_pct, self._battery_pct(node))
        lo = max(node.last_t, self.window[0])
        hi = min(now, self.window[1])
        overlap = hi - lo
        if overlap > 0:
            rec = self.record
            rec.energy_j += node.power_w * overlap
            if node.state == "on":
                rec.cap_cpu_t += node.cpu * overlap
                rec.cap_mem_t += node.mem * overlap
                rec.used_cpu_t += node.cpu_alloc * overlap
                rec.used_mem_t += node.mem_alloc * overlap
            rec.gpu_t += node.gpu_units * overlap
        node.last_t = now

    def _battery_pct(self, node: _Node) -> float:
        return max(0.0, 100.0 * node.battery_wh / node.battery_cap) if node.battery_cap else 100.0

    def _repower(self, node: _Node) -> None:
        spec = node.spec
        if node.state == "dead":
            node.power_w = 0.0
        elif node.state == "sleep":
            node.power_w = spec.sleep_w
        elif node.state == "waking":
            node.power_w = spec.idle_w + node.gpus * spec.gpu_idle_w + node.dpus * spec.dpu_idle_w
        else:
            util = min(node.cpu_alloc / node.cpu, 1.0) if node.cpu else 0.0
            node.power_w = (
                spec.idle_w
                + (spec.max_w - spec.idle_w) * util
                + node.gpus * spec.gpu_idle_w
                + (spec.gpu_max_w - spec.gpu_idle_w) * min(node.gpu_units, node.gpus)
                + node.dpus * spec.dpu_idle_w
                + (spec.dpu_max_w - spec.dpu_idle_w) * min(node.dpus_busy, node.dpus)
            )

    def _contention(self, node: _Node) -> float:
        model = self.preset.contention
        u = node.cpu_alloc / node.cpu if node.cpu else 0.0
        return model.amplitude * min(1.0, max(0.0, (u - model.knee) / (1.0 - model.knee)))

    def _rate(self, rep: _Replica, node: _Node, c: float) -> float:
        slow = 1.0 + rep.sens * c
        if rep.io and node.io_count > 1:
            slow *= 1.0 + self.preset.contention.io_penalty * (node.io_count - 1)
        return 1.0 / slow

    def _change_load(self, node: _Node, apply: Callable[[], None]) -> None:
        """Settle progress at the old rates, change the node's load, then re-rate its replicas."""
        now = self.now
        self._advance(node, now)
        before_c = self._contention(node)
        before_io = node.io_count
        for rep in node.replicas.values():
            rep.work_left -= (now - rep.last) * rep.rate
            rep.last = now
        apply()
        after_c = self._contention(node)
        if after_c != before_c or node.io_count != before_io:
            for rep in node.replicas.values():
                rate = self._rate(rep, node, after_c)
                if rate != rep.rate:
                    rep.rate = rate
                    rep.version += 1
                    self._push(now + max(rep.work_left, 0.0) / rate, _FINISH, (rep, rep.version))
        self._repower(node)

    # -- tasks -----------------------------------------------------------------------------

    def _work(self, task: _Task, node: _Node) -> float:
        """Nominal seconds alone on an idle node, plus pulling the input over the true network."""
        req = task.spec.request
        work = task.spec.runtime_s
        location = req.data_location
        if location is None:
            return work
        source = self.by_name.get(location)
        if req.data_bytes > 0 and source is not None:
            # The nominal runtime already includes a local read; pay only the difference.
            local = self.network.transfer_s(source.index, source.index, req.data_bytes)
            work += max(0.0, self.network.transfer_s(source.index, node.index, req.data_bytes) - local)
        elif req.data_bytes > 0:
            work += self.network.transfer_from_region_s(location, node.index, req.data_bytes)
        elif self.preset.federation is not None:
            # Request in, response out: two round trips between the user's region and the node.
            region = self.network.places[node.index].region
            work += 2 * self.preset.federation.latency_between(location, region) / 1000.0
        return work

    def _start(self, task: _Task, index: int, node_name: str, assignment: Assignment) -> None:
        node = self.by_name[node_name]
        spec = task.spec
        rep = _Replica(
            task,
            index,
            node,
            assignment,
            self._work(task, node),
            self.sens.get(spec.kind, 1.0),
            spec.kind == "analytics",
            self.now,
        )

        def add() -> None:
            node.replicas[(spec.id, index)] = rep
            node.cpu_alloc += assignment.cpu
            node.mem_alloc += assignment.memory
            node.gpu_units += (
                len(assignment.gpus) + sum(_MIG_COMPUTE[s.profile] for s in assignment.mig) / 7.0
            )
            node.dpus_busy += len(assignment.dpus)
            if rep.io:
                node.io_count += 1

        self._change_load(node, add)
        rep.rate = self._rate(rep, node, self._contention(node))
        self._push(self.now + rep.work_left / rep.rate, _FINISH, (rep, rep.version))
        task.placed[index] = rep
        if task.full_start is None and len(task.placed) + len(task.finished) >= spec.request.replicas:
            task.full_start = self.now

    def _stop(self, rep: _Replica) -> None:
        node = rep.node
        a = rep.assignment

        def remove() -> None:
            node.replicas.pop((rep.task.spec.id, rep.index), None)
            node.cpu_alloc = max(0.0, node.cpu_alloc - a.cpu)
            node.mem_alloc = max(0.0, node.mem_alloc - a.memory)
            node.gpu_units = max(
                0.0, node.gpu_units - len(a.gpus) - sum(_MIG_COMPUTE[s.profile] for s in a.mig) / 7.0
            )
            node.dpus_busy -= len(a.dpus)
            if rep.io:
                node.io_count -= 1
            if not node.replicas:
                node.idle_since = self.now

        self._change_load(node, remove)
        rep.version += 1
        rep.task.placed.pop(rep.index, None)

    def _schedule(self, task: _Task, replicas: list[int] | None = None) -> None:
        t0 = time.perf_counter()
        decision = self.sched.schedule(task.spec.request, replicas=replicas)
        elapsed = time.perf_counter() - t0
        self.record.decision_ms.append(elapsed * 1000.0)
        self.record.decision_time_s += elapsed
        self._apply(decision)

    def _apply(self, decision: Decision) -> None:
        for victim in decision.victims:
            self.record.preemptions += 1
            self._evicted(victim.workload_id, victim.replica)
        for move in decision.migrations:
            self.record.merges += 1
            task = self.tasks[move.workload_id]
            rep = task.placed.get(move.replica)
            if rep is not None:
                rep.work_left = self._work(task, rep.node) + self.preset.contention.restart_penalty_s
                rep.last = self.now
                rep.assignment = move.new
                rep.version += 1
                self._push(self.now + rep.work_left / rep.rate, _FINISH, (rep, rep.version))
        task = self.tasks[decision.workload_id]
        for placement in decision.placements:
            if placement.placed and placement.node and placement.assignment and task.resolved is False:
                if placement.replica not in task.placed:
                    self._start(task, placement.replica, placement.node, placement.assignment)

    def _evicted(self, workload_id: str, replica: int) -> None:
        """The scheduler evicted a replica (already released there): stop and resubmit it."""
        rep = self.tasks[workload_id].placed.get(replica)
        if rep is not None:
            self._restart(rep)

    def _restart(self, rep: _Replica) -> None:
        """A replica was lost (eviction, dead node): its progress is gone; submit it again."""
        task = rep.task
        if task.placed.get(rep.index) is not rep:
            return
        self._stop(rep)
        task.restarts += 1
        redo = [rep.index]
        if task.spec.request.gang:
            # An MPI gang cannot run with a member missing: restart the whole gang.
            for other in list(task.placed.values()):
                self.sched.release(task.spec.id, other.index)
                self._stop(other)
            task.finished.clear()
            redo = list(range(task.spec.request.replicas))
        self._schedule(task, redo)

    def _on_arrive(self, task: _Task) -> None:
        self._schedule(task)
        if task.spec.patience_s is not None and task.full_start is None:
            self._push(task.spec.arrival_s + task.spec.patience_s, _GIVEUP, task)

    def _on_finish(self, payload: tuple[_Replica, int]) -> None:
        rep, version = payload
        if rep.version != version or rep.task.placed.get(rep.index) is not rep:
            return
        task = rep.task
        self._stop(rep)
        self.sched.release(task.spec.id, rep.index)
        task.finished.add(rep.index)
        if len(task.finished) >= task.spec.request.replicas:
            task.done_at = self.now
            self._resolve(task)
        self._retry_pending()

    def _on_giveup(self, task: _Task) -> None:
        if task.resolved or task.full_start is not None:
            return
        self.sched.cancel(task.spec.id)
        for rep in list(task.placed.values()):
            self.sched.release(task.spec.id, rep.index)
            self._stop(rep)
        task.dropped = True
        self._resolve(task)
        self._retry_pending()

    def _resolve(self, task: _Task) -> None:
        if task.resolved:
            return
        task.resolved = True
        if task.spec.measured:
            self.measured_resolved += 1

    def _retry_pending(self) -> None:
        if not len(self.sched.queue):
            return
        t0 = time.perf_counter()
        decisions = self.sched.schedule_pending()
        self.record.pending_time_s += time.perf_counter() - t0
        self.record.pending_calls += 1
        for decision in decisions:
            self._apply(decision)

    # -- power manager, batteries, probes --------------------------------------------------

    def _update_battery_flag(self, node: _Node, now: float) -> bool:
        """Solar + battery nodes run on battery outside solar hours. True if it changed."""
        if not node.has_battery:
            return False
        hour = (self.preset.start_hour + now / 3600.0) % 24.0
        lo, hi = self.preset.solar_hours
        on_battery = not (lo <= hour < hi)
        changed = on_battery != node.on_battery
        node.on_battery = on_battery
        return changed

    def _report_node(self, node: _Node) -> None:
        self.sched.upsert_node(
            replace(
                node.template,
                ready=node.state == "on",
                power_source="battery" if node.on_battery else "mains",
                battery_percent=self._battery_pct(node) if node.has_battery else None,
            )
        )

    def _kill_node(self, node: _Node) -> None:
        self._advance(node, self.now)
        node.dead_events += 1
        self.record.battery_deaths += 1
        victims = list(node.replicas.values())
        node.state = "dead"
        self._report_node(node)
        for rep in victims:
            self.sched.release(rep.task.spec.id, rep.index)
            self._restart(rep)
        self._repower(node)

    def _on_tick(self) -> None:
        now = self.now
        for node in self.nodes:
            if not node.has_battery:
                continue
            self._advance(node, now)
            self._update_battery_flag(node, now)
            if node.state != "dead" and node.on_battery and node.battery_wh <= 0:
                self._kill_node(node)
                continue
            if node.state == "dead" and not node.on_battery and self._battery_pct(node) >= 20.0:
                node.state = "on"
                node.idle_since = now
                self._repower(node)
            self._report_node(node)
        if self.preset.power_manager.enabled:
            self._manage_power()
        self._probe_links()
        self._retry_pending()

    def _probe_links(self) -> None:
        n = len(self.nodes)
        if n < 2:
            return
        pairs = self.rng.integers(0, n, size=(30, 2))
        for a, b in pairs:
            if a == b:
                continue
            latency, bandwidth = self.network.measure(int(a), int(b), self.rng)
            self.sched.observe_link(self.nodes[a].name, self.nodes[b].name, latency, bandwidth, at=self.now)

    def _can_host(self, node: _Node, res: Any) -> bool:
        return (
            node.cpu >= res.cpu
            and node.mem >= res.memory
            and node.whole_gpus >= res.gpu
            and (not res.mig or node.mig_gpus > 0)
            and node.dpus >= res.dpu
        )

    def _manage_power(self) -> None:
        cfg = self.preset.power_manager
        now = self.now
        pools: dict[str, list[_Node]] = {}
        for node in self.nodes:
            pools.setdefault(node.group, []).append(node)
        # Wake for waiting work: one host-capable sleeping node per waiting replica not covered
        # by nodes already waking (what a cluster autoscaler does on pending pods).
        waking_free: dict[str, float] = {n.name: n.cpu for n in self.nodes if n.state == "waking"}
        wakes = 0
        wake_order = self._wake_order(self.nodes)  # waking changes states, not the order
        for entry in self.sched.queue.ordered():
            res = entry.request.resources
            for _ in entry.replicas:
                covered = next(
                    (
                        k
                        for k, free in waking_free.items()
                        if free >= res.cpu and self._can_host(self.by_name[k], res)
                    ),
                    None,
                )
                if covered is not None:
                    waking_free[covered] -= res.cpu
                    continue
                sleeper = next((n for n in wake_order if n.state == "sleep" and self._can_host(n, res)), None)
                if sleeper is None or wakes >= 20:
                    break
                self._wake(sleeper)
                wakes += 1
                waking_free[sleeper.name] = sleeper.cpu - res.cpu
        # Keep each pool's reserves (free CPU, whole empty nodes); suspend idle nodes beyond them.
        for members in pools.values():
            alive = [n for n in members if n.state != "dead"]
            total = sum(n.cpu for n in alive)
            reserve = cfg.reserve_fraction * total
            empty_target = max(1, math.ceil(cfg.reserve_empty_fraction * len(alive)))
            free = sum(n.cpu - n.cpu_alloc for n in alive if n.state == "on")
            free += sum(n.cpu for n in alive if n.state == "waking")
            empty = sum(1 for n in alive if (n.state == "on" and not n.replicas) or n.state == "waking")
            if free < reserve or empty < empty_target:
                for n in self._wake_order(alive):
                    if free >= reserve and empty >= empty_target:
                        break
                    if n.state == "sleep":
                        self._wake(n)
                        free += n.cpu
                        empty += 1
                continue
            for n in self._wake_order(alive, suspend=True):
                if (
                    n.state == "on"
                    and not n.replicas
                    and now - n.idle_since >= cfg.sleep_after_s
                    and free - n.cpu >= reserve
                    and empty - 1 >= empty_target
                ):
                    self._advance(n, now)
                    n.state = "sleep"
                    self.record.sleeps += 1
                    self._repower(n)
                    self.sched.set_node_ready(n.name, False)
                    free -= n.cpu
                    empty -= 1

    def _wake_order(self, nodes: list[_Node], *, suspend: bool = False) -> list[_Node]:
        """Nodes in the order the power manager wakes them (``suspend``: suspends them).

        Under a battery-aware profile a node's agent weights energy higher on battery (more as
        the charge falls), so it is woken last and suspended first: the reserve of awake, empty
        nodes is then held by mains-powered nodes, not by a battery draining through the night.
        Without an adaptive rule (or with no node on battery) the order is the fleet order.
        """
        if not self.sched.battery_aware or not any(n.on_battery for n in nodes):
            return list(nodes)
        weights = self.sched.energy_weights([n.name for n in nodes])
        order = np.argsort(-weights if suspend else weights, kind="stable")
        return [nodes[i] for i in order]

    def _wake(self, node: _Node) -> None:
        self._advance(node, self.now)
        node.state = "waking"
        self.record.wakes += 1
        self._repower(node)
        self._push(self.now + node.spec.wake_s, _WAKE, node)

    def _on_wake(self, node: _Node) -> None:
        if node.state != "waking":
            return
        self._advance(node, self.now)
        node.state = "on"
        node.idle_since = self.now
        self._repower(node)
        self.sched.set_node_ready(node.name, True)
        self._retry_pending()

    # -- results ---------------------------------------------------------------------------

    def _finalise(self, wall_s: float) -> None:
        rec = self.record
        rec.wall_s = wall_s
        rec.stats = dict(self.sched.stats)
        batteries = [n for n in self.nodes if n.has_battery]
        rec.battery_nodes = len(batteries)
        rec.depleted_batteries = sum(1 for n in batteries if n.dead_events > 0)
        if batteries:
            rec.min_battery_pct = min(n.min_battery_pct for n in batteries)
            rec.battery_drawn_wh = sum(n.battery_drawn_wh for n in batteries)
        for task in self.order:
            spec = task.spec
            if not spec.measured:
                continue
            latency = task.done_at - spec.arrival_s if task.done_at is not None else None
            if not task.resolved:
                rec.unfinished += 1
            violated = spec.sla_s is not None and (task.dropped or latency is None or latency > spec.sla_s)
            started_in_time = task.full_start is not None and (
                spec.patience_s is None or task.full_start - spec.arrival_s <= spec.patience_s + 1e-9
            )
            rec.tasks.append(
                {
                    "cls": spec.cls,
                    "kind": spec.kind,
                    "latency_s": latency,
                    "sla_s": spec.sla_s,
                    "violated": violated,
                    "dropped": task.dropped,
                    "large_gpu": spec.large_gpu,
                    "started_in_time": started_in_time,
                    "queue_s": (task.full_start - spec.arrival_s) if task.full_start is not None else None,
                    "stretch": (task.done_at - task.full_start) / spec.runtime_s
                    if task.done_at is not None and task.full_start is not None and spec.runtime_s > 0
                    else None,
                    "restarts": task.restarts,
                }
            )
