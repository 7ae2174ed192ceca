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

This module holds the event loop and the workload's life cycle; the fleet's physics (rates,
power, batteries) is :mod:`.physics`, the power manager :mod:`.power_manager`, the raw record
:mod:`.record` and its metrics :mod:`.metrics`, the hidden physics :mod:`.physics_params`.

**Stepping** (issue 23): a ``chooser`` given to the simulation picks the node of every replica
the scheduler places (``Scheduler.chooser``, called in each cycle with its scored candidates;
the scheduler's filters, post-filters, queue and gangs stay in charge), and
:meth:`Simulation.meter` reads the measured outcomes so far without advancing anything.
``controlplane.learn`` turns the chooser's calls into ``step()`` boundaries; :meth:`Simulation.run`
itself is unchanged, and a chooser that returns the profile's own pick gives the same record.
About 510 lines: one event loop and the task life cycle it drives, kept together.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from controlplane.scheduling.cycle import Chooser
from controlplane.scheduling.framework import PluginFactory
from controlplane.scheduling.interference import LoadProfile
from controlplane.scheduling.model import Assignment, Decision
from controlplane.scheduling.scheduler import Scheduler
from controlplane.scheduling.topology import TopologyGraph
from controlplane.sim.metrics import credit_running, credit_served, record_outcomes
from controlplane.sim.migfit import arrival_fit
from controlplane.sim.network import Network
from controlplane.sim.physics import (
    FleetPhysics,
    SimNode,
    SimReplica,
    SimTask,
    battery_pct,
    build_fleet,
    occupy,
    repower,
    vacate,
)
from controlplane.sim.physics_params import PhysicsParams, draw_physics
from controlplane.sim.power_manager import PowerManager
from controlplane.sim.presets import Preset
from controlplane.sim.record import RunRecord
from controlplane.sim.workload import TaskSpec

__all__ = ["Meter", "RunRecord", "Simulation"]  # RunRecord lives in .record; importable from here too

_ARRIVE, _FINISH, _GIVEUP, _WAKE, _TICK, _END = range(6)


@dataclass(frozen=True, slots=True)
class Meter:
    """A run's measured outcomes so far (measured tasks, the measured window) as :mod:`.metrics`
    defines them; once the run has ended, its record's.

    Energy counts what the record holds plus what it will be credited for the time since each
    node was last brought up to date (reading advances nothing), so the differences between
    successive readings add up to the run's totals."""

    t: float
    sla_violations: int
    """Measured tasks with an SLA that finished late or gave up (at the end: or never finished)."""
    energy_j: float
    """The fleet's energy in the window (``energy_kwh`` x 3.6e6)."""
    battery_wh: float
    """Energy drawn from batteries over the whole run (``battery_drawn_wh``)."""
    served_cpu_t: float
    """Work served in the window, vCPU-seconds (credited when a replica finishes)."""
    queue_s: float
    """Seconds measured tasks waited: arrival to full start, to giving up, or to now."""
    finished: bool


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
        progress: Callable[[str, float, tuple[float, float]], None] | None = None,
        physics: PhysicsParams | None = None,
        chooser: Chooser | None = None,
        plugins: Mapping[str, PluginFactory] | None = None,
    ) -> None:
        """``chooser``: picks each replica's node instead of the profile (module docstring);
        ``plugins``: the scheduler's plugin factories by name (None: the built-in registry)."""
        self.preset = preset
        # The hidden physics (default: the preset's reference constants); the scheduler never
        # sees it, only the runtimes it produces (see _observe).
        self.truth = physics if physics is not None else draw_physics(preset, None)
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
            registry=plugins,
        )
        self.sched.chooser = chooser
        # Told of every workload as it ends: (id, latency or None if it never finished, SLA, now).
        self.on_resolved: Callable[[str, float | None, float | None, float], None] | None = None
        self.rng = np.random.default_rng([seed, 7])
        self.nodes, places = build_fleet(preset, self.sched, self.truth.power_specs)
        self.by_name = {node.name: node for node in self.nodes}
        self.network = Network(
            places, fed, np.random.default_rng([seed, 11]), congested_fraction=preset.congested_link_fraction
        )
        self.tasks = {spec.id: SimTask(spec) for spec in tasks}
        self.order = [self.tasks[spec.id] for spec in tasks]
        self.measured_total = sum(1 for spec in tasks if spec.measured)
        self.measured_resolved = 0
        # The meter's running tallies (see meter()); nothing in the run reads them.
        self.sla_violations = 0
        self.waiting = 0  # measured tasks arrived, not fully started, not resolved
        self.waiting_since = 0.0  # the sum of their arrival times
        self.waited_s = 0.0  # the waits that have ended
        self.finished = False
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.sens = self.truth.sensitivity
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
            power_manager=preset.power_manager.enabled,
        )
        self.physics = FleetPhysics(preset, self.window, self.record, self.truth.contention)
        self.power = PowerManager(preset.power_manager, self.nodes, self.sched, self.physics, self._wake)
        for node in self.nodes:
            self.physics.update_battery_flag(node, 0.0)
            repower(node)

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
                    self.physics.advance(node, t)
            if arrivals_done and self.measured_resolved >= self.measured_total:
                break
            if self.progress is not None and t - last_report >= 3600.0:
                last_report = t
                self.progress(self.name, t, self.window)
        for node in self.nodes:
            self.physics.advance(node, min(self.now, self.window[1]))
        credit_running(self.record, self.nodes, self.now, self.window)
        record_outcomes(self.record, self.nodes, self.order, self.sched.stats, time.perf_counter() - started)
        self.finished = True
        return self.record

    def meter(self) -> Meter:
        """The measured outcomes up to now (see :class:`Meter`); reads, advances nothing."""
        rec = self.record
        queue_s = self.waited_s + self.waiting * self.now - self.waiting_since
        if self.finished:
            violations = sum(1 for t in rec.tasks if t["violated"])
            return Meter(
                self.now, violations, rec.energy_j, rec.battery_drawn_wh, rec.served_cpu_t, queue_s, True
            )
        energy_j = rec.energy_j
        battery_wh = 0.0
        lo, hi = self.window
        for node in self.nodes:
            # What physics.advance(node, now) would credit, without doing it.
            energy_j += node.power_w * max(0.0, min(self.now, hi) - max(node.last_t, lo))
            battery_wh += node.battery_drawn_wh
            if node.has_battery and node.on_battery and node.state != "dead" and self.now > node.last_t:
                battery_wh += node.power_w * (self.now - node.last_t) / 3600.0
        return Meter(self.now, self.sla_violations, energy_j, battery_wh, rec.served_cpu_t, queue_s, False)

    # -- tasks -----------------------------------------------------------------------------

    def _work(self, task: SimTask, node: SimNode) -> float:
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

    def _change_load(self, node: SimNode, apply: Callable[[], None]) -> None:
        """Change the node's load (physics re-rates its replicas); reschedule changed finishes."""
        now = self.now
        for rep in self.physics.change_load(node, now, apply):
            self._push(now + max(rep.work_left, 0.0) / rep.rate, _FINISH, (rep, rep.version))

    def _start(self, task: SimTask, index: int, node_name: str, assignment: Assignment) -> None:
        node = self.by_name[node_name]
        spec = task.spec
        rep = SimReplica(
            task,
            index,
            node,
            assignment,
            self._work(task, node),
            self.sens.get(spec.kind, 1.0),
            spec.kind == "analytics",
            self.now,
        )
        self._change_load(node, lambda: occupy(node, rep))
        rep.rate = self.physics.rate(rep, node, self.physics.contention(node))
        self._push(self.now + rep.work_left / rep.rate, _FINISH, (rep, rep.version))
        task.placed[index] = rep
        if task.full_start is None and len(task.placed) + len(task.finished) >= spec.request.replicas:
            task.full_start = self.now
            self._stop_waiting(task)

    def _stop(self, rep: SimReplica) -> None:
        node = rep.node
        self._change_load(node, lambda: vacate(node, rep, self.now))
        rep.version += 1
        rep.task.placed.pop(rep.index, None)

    def _schedule(self, task: SimTask, replicas: list[int] | None = None) -> None:
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
                rep.work_left = self._work(task, rep.node) + self.truth.contention.restart_penalty_s
                rep.last = self.now
                rep.observable = False
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

    def _restart(self, rep: SimReplica) -> None:
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

    def _on_arrive(self, task: SimTask) -> None:
        spec = task.spec
        self.power.observe_arrival(spec.request, self.now)
        if spec.measured:
            self.waiting += 1
            self.waiting_since += spec.arrival_s
        if spec.large_gpu and spec.measured and len(spec.request.resources.mig) == 1:
            task.arrival_fit = arrival_fit(self.nodes, spec.request.resources.mig[0])
        self._schedule(task)
        if task.spec.patience_s is not None and task.full_start is None:
            self._push(task.spec.arrival_s + task.spec.patience_s, _GIVEUP, task)

    def _on_finish(self, payload: tuple[SimReplica, int]) -> None:
        rep, version = payload
        if rep.version != version or rep.task.placed.get(rep.index) is not rep:
            return
        task = rep.task
        credit_served(self.record, rep, self.now, self.window)
        self._stop(rep)
        self.sched.release(task.spec.id, rep.index)
        self._observe(rep)
        task.finished.add(rep.index)
        if len(task.finished) >= task.spec.request.replicas:
            task.done_at = self.now
            self._resolve(task)
        self._retry_pending()

    def _observe(self, rep: SimReplica) -> None:
        """Tell the scheduler what an agent would report at a replica's completion: its runtime,
        the runtime it was expected to take alone (the request's estimate plus the input pull,
        which the agent times separately) and its node's load while it ran."""
        spec = rep.task.spec
        expected = spec.request.expected_runtime_s
        if not rep.observable or expected is None:
            return
        observed = self.now - rep.started
        pull = max(0.0, rep.nominal_s - spec.runtime_s)
        io_others = rep.io_t / observed if observed > 0 else 0.0
        self.sched.observe_runtime(spec.kind, expected + pull, observed, LoadProfile(rep.load_t, io_others))

    def _on_giveup(self, task: SimTask) -> None:
        if task.resolved or task.full_start is not None:
            return
        self.sched.cancel(task.spec.id)
        for rep in list(task.placed.values()):
            self.sched.release(task.spec.id, rep.index)
            self._stop(rep)
        task.dropped = True
        self._resolve(task)
        self._retry_pending()

    def _resolve(self, task: SimTask) -> None:
        if task.resolved:
            return
        task.resolved = True
        spec = task.spec
        if self.on_resolved is not None:
            done = None if task.dropped or task.done_at is None else task.done_at - spec.arrival_s
            self.on_resolved(spec.id, done, spec.sla_s, self.now)
        if spec.measured:
            self.measured_resolved += 1
            if task.full_start is None:
                self._stop_waiting(task)
            if spec.sla_s is not None:
                # As metrics.record_outcomes decides it at the end.
                late = task.done_at is None or task.done_at - spec.arrival_s > spec.sla_s
                self.sla_violations += int(task.dropped or late)

    def _stop_waiting(self, task: SimTask) -> None:
        """A measured task's wait ended (full start or giving up): the meter's queueing."""
        spec = task.spec
        if spec.measured:
            self.waiting -= 1
            self.waiting_since -= spec.arrival_s
            self.waited_s += self.now - spec.arrival_s

    def _retry_pending(self) -> None:
        if not len(self.sched.queue):
            return
        t0 = time.perf_counter()
        decisions = self.sched.schedule_pending()
        self.record.pending_time_s += time.perf_counter() - t0
        self.record.pending_calls += 1
        for decision in decisions:
            self._apply(decision)

    # -- batteries, link probes, waking --------------------------------------------------

    def _report_node(self, node: SimNode) -> None:
        self.sched.upsert_node(
            replace(
                node.template,
                ready=node.state == "on",
                power_source="battery" if node.on_battery else "mains",
                battery_percent=battery_pct(node) if node.has_battery else None,
            )
        )

    def _kill_node(self, node: SimNode) -> None:
        self.physics.advance(node, self.now)
        node.dead_events += 1
        self.record.battery_deaths += 1
        victims = list(node.replicas.values())
        node.state = "dead"
        self._report_node(node)
        for rep in victims:
            self.sched.release(rep.task.spec.id, rep.index)
            self._restart(rep)
        repower(node)

    def _on_tick(self) -> None:
        now = self.now
        for node in self.nodes:
            if not node.has_battery:
                continue
            self.physics.advance(node, now)
            self.physics.update_battery_flag(node, now)
            if node.state != "dead" and node.on_battery and node.battery_wh <= 0:
                self._kill_node(node)
                continue
            if node.state == "dead" and not node.on_battery and battery_pct(node) >= 20.0:
                node.state = "on"
                node.idle_since = now
                repower(node)
            self._report_node(node)
        if self.preset.power_manager.enabled:
            self.power.manage(now)
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

    def _wake(self, node: SimNode) -> None:
        self.physics.advance(node, self.now)
        node.state = "waking"
        self.record.wakes += 1
        repower(node)
        self._push(self.now + node.spec.wake_s, _WAKE, node)

    def _on_wake(self, node: SimNode) -> None:
        if node.state != "waking":
            return
        self.physics.advance(node, self.now)
        node.state = "on"
        node.idle_since = self.now
        repower(node)
        self.sched.set_node_ready(node.name, True)
        self._retry_pending()
