"""The fleet's physics: nodes, the replicas on them, contention, power draw and batteries.

What the scheduler cannot set and the simulation models (see :mod:`.engine`): a replica's
progress rate under its node's CPU contention and I/O neighbours, the node's power draw from its
load and state, and a solar + battery node's charge. Time advances per node (``advance``) and
is accounted into the run's :class:`~.record.RunRecord` over the measured window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from edgeplane_contract.power import DEFAULT_POWER_SPECS, PowerSpec

from controlplane.scheduling.model import Assignment, GpuDevice, NodeState
from controlplane.scheduling.nodetable import ZONE_LABEL
from controlplane.scheduling.scheduler import Scheduler
from controlplane.sim.network import NodePlace
from controlplane.sim.presets import GB, ContentionModel, PhysicsFamily, Preset
from controlplane.sim.record import RunRecord
from controlplane.sim.workload import TaskSpec

__all__ = [
    "LOAD_BINS",
    "FleetPhysics",
    "PowerCurve",
    "SimNode",
    "SimReplica",
    "SimTask",
    "battery_pct",
    "build_fleet",
    "gpu_units",
    "occupy",
    "repower",
    "vacate",
]

# The node's CPU allocation during a replica's life, as seconds spent in each of LOAD_BINS
# equal-width bins of [0, 1]: what an agent sampling its node's load could report with the
# replica's completion (the interference estimator's input; never the contention model).
LOAD_BINS = 40

_MIG_COMPUTE = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}


@dataclass(frozen=True, slots=True)
class PowerCurve(PowerSpec):
    """A true power curve the nameplate does not tell (the ``noisy-power`` family): each node
    draws its own exponent in ``exponent_range`` (dynamic CPU power ~ utilisation ** exponent),
    and the dynamic power is off by a relative ``noise`` (normal) at each load change."""

    exponent_range: tuple[float, float] = (1.0, 1.0)
    noise: float = 0.0
    seed: int = 0


class SimNode:
    """One machine of the fleet: its capacity, load, power state, battery and accounting."""

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
        "kind_cpu",
        "last_t",
        "mem",
        "mem_alloc",
        "mig_gpus",
        "min_battery_pct",
        "name",
        "node_type",
        "on_battery",
        "power_exponent",
        "power_noise",
        "power_rng",
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
        self.replicas: dict[tuple[str, int], SimReplica] = {}
        self.cpu_alloc = 0.0
        self.mem_alloc = 0.0
        self.gpu_units = 0.0
        self.dpus_busy = 0
        self.io_count = 0
        self.kind_cpu: dict[str, float] = {}  # CPU allocated per workload kind
        self.last_t = 0.0
        self.power_w = 0.0
        # The true power curve's shape beyond the spec (PowerCurve): linear and exact by default.
        self.power_exponent = 1.0
        self.power_noise = 0.0
        self.power_rng: np.random.Generator | None = None
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


class SimReplica:
    """One running replica: its work left (nominal seconds) and current progress rate."""

    __slots__ = (
        "assignment",
        "index",
        "io",
        "io_t",
        "last",
        "load_t",
        "node",
        "nominal_s",
        "observable",
        "rate",
        "sens",
        "started",
        "task",
        "version",
        "work_left",
    )

    def __init__(
        self,
        task: SimTask,
        index: int,
        node: SimNode,
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
        self.nominal_s = work  # seconds alone on an idle node, input pull included
        self.rate = 1.0
        self.last = now
        self.version = 0
        self.sens = sens
        self.io = io
        self.started = now
        self.load_t = [0.0] * LOAD_BINS
        self.io_t = 0.0  # integral of the other I/O-heavy replicas on the node over time
        self.observable = True  # False once a move restarted it (its runtime no longer says much)


class SimTask:
    """One arrival of the workload and what became of its replicas."""

    __slots__ = (
        "arrival_fit",
        "done_at",
        "dropped",
        "finished",
        "full_start",
        "placed",
        "resolved",
        "restarts",
        "spec",
    )

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.placed: dict[int, SimReplica] = {}
        self.finished: set[int] = set()
        self.done_at: float | None = None
        self.dropped = False
        self.full_start: float | None = None
        self.restarts = 0
        self.resolved = False
        # A large MIG request's fleet at arrival (.migfit: fits, fragmented, no_room), else None.
        self.arrival_fit: str | None = None


def gpu_units(assignment: Assignment) -> float:
    """GPU compute an assignment uses: whole GPUs, MIG slices as sevenths."""
    return len(assignment.gpus) + sum(_MIG_COMPUTE[s.profile] for s in assignment.mig) / 7.0


def battery_pct(node: SimNode) -> float:
    """The battery's charge in percent (100 for a node without one)."""
    return max(0.0, 100.0 * node.battery_wh / node.battery_cap) if node.battery_cap else 100.0


def repower(node: SimNode) -> None:
    """Set the node's power draw from its state and load (per-node-type power model)."""
    spec = node.spec
    if node.state == "dead":
        node.power_w = 0.0
    elif node.state == "sleep":
        node.power_w = spec.sleep_w
    elif node.state == "waking":
        node.power_w = spec.idle_w + node.gpus * spec.gpu_idle_w + node.dpus * spec.dpu_idle_w
    elif node.power_rng is None:
        util = min(node.cpu_alloc / node.cpu, 1.0) if node.cpu else 0.0
        node.power_w = (
            spec.idle_w
            + (spec.max_w - spec.idle_w) * util
            + node.gpus * spec.gpu_idle_w
            + (spec.gpu_max_w - spec.gpu_idle_w) * min(node.gpu_units, node.gpus)
            + node.dpus * spec.dpu_idle_w
            + (spec.dpu_max_w - spec.dpu_idle_w) * min(node.dpus_busy, node.dpus)
        )
    else:
        _repower_curve(node, spec)


def _repower_curve(node: SimNode, spec: PowerSpec) -> None:
    """An awake node's draw on a :class:`PowerCurve`: bent CPU term, noisy dynamic power."""
    assert node.power_rng is not None
    util = min(node.cpu_alloc / node.cpu, 1.0) if node.cpu else 0.0
    dynamic = (
        (spec.max_w - spec.idle_w) * util**node.power_exponent
        + (spec.gpu_max_w - spec.gpu_idle_w) * min(node.gpu_units, node.gpus)
        + (spec.dpu_max_w - spec.dpu_idle_w) * min(node.dpus_busy, node.dpus)
    )
    noise = max(0.0, 1.0 + node.power_noise * float(node.power_rng.standard_normal()))
    static = spec.idle_w + node.gpus * spec.gpu_idle_w + node.dpus * spec.dpu_idle_w
    node.power_w = static + dynamic * noise


def build_fleet(
    preset: Preset, sched: Scheduler, power_specs: Mapping[str, PowerSpec] | None = None
) -> tuple[list[SimNode], list[NodePlace]]:
    """The preset's nodes in group order, each reported to ``sched``, and where each one is.

    ``power_specs``: the true power curves (the physics seed's draw; default the nameplate)."""
    specs = DEFAULT_POWER_SPECS if power_specs is None else power_specs
    nodes: list[SimNode] = []
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
            node = SimNode(len(nodes), template, specs[group.node_type], group.prefix)
            if isinstance(node.spec, PowerCurve):
                _bend(node, node.spec)
            # Spread battery nodes through the group (every other one for a half).
            if batteries and (k * batteries) // group.count != ((k + 1) * batteries) // group.count:
                node.has_battery = True
                node.battery_cap = group.battery_wh
                node.battery_wh = 0.8 * group.battery_wh
                node.charge_w = group.charge_w
            nodes.append(node)
            sched.upsert_node(template)
            places.append(NodePlace(sched.nodes.zones.ids[zone], group.cluster, group.region))
    return nodes, places


def _bend(node: SimNode, curve: PowerCurve) -> None:
    """Give the node its own draw of the curve's exponent and its own noise stream."""
    rng = np.random.default_rng([curve.seed, 31, node.index])
    node.power_exponent = float(rng.uniform(*curve.exponent_range))
    node.power_noise = curve.noise
    node.power_rng = rng


class FleetPhysics:
    """Advances nodes through time and re-rates replicas when a node's load changes."""

    def __init__(
        self,
        preset: Preset,
        window: tuple[float, float],
        record: RunRecord,
        contention: ContentionModel | None = None,
    ) -> None:
        self.contention_model: ContentionModel = preset.contention if contention is None else contention
        model = self.contention_model
        self.family = PhysicsFamily(model.family)
        self.membw = dict(model.membw)
        self.pairwise: dict[str, list[tuple[str, float]]] = {}
        for victim, neighbour, effect in model.pairwise:
            self.pairwise.setdefault(victim, []).append((neighbour, effect))
        # Under the knee-form families a replica's rate depends only on c(u) and the I/O count;
        # under the others on the node's mix, so every load change re-rates the node.
        self.mix_rated = self.family in (PhysicsFamily.CONVEX_MEMBW, PhysicsFamily.PAIRWISE)
        self.start_hour = preset.start_hour
        self.solar_hours = preset.solar_hours
        self.window = window
        self.record = record

    def advance(self, node: SimNode, now: float) -> None:
        """Bring the node's battery and the record's in-window accounting up to ``now``."""
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
            node.min_battery_pct = min(node.min_battery_pct, battery_pct(node))
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

    def update_battery_flag(self, node: SimNode, now: float) -> bool:
        """Solar + battery nodes run on battery outside solar hours. True if it changed."""
        if not node.has_battery:
            return False
        hour = (self.start_hour + now / 3600.0) % 24.0
        lo, hi = self.solar_hours
        on_battery = not (lo <= hour < hi)
        changed = on_battery != node.on_battery
        node.on_battery = on_battery
        return changed

    def contention(self, node: SimNode) -> float:
        """The ground-truth slowdown factor of the node's load: ``c(u)`` at its CPU allocation
        ``u`` (knee forms), ``a * b ** p`` at its bandwidth demand ``b`` (``convex-membw``),
        0 under ``pairwise`` (each replica's slowdown is its own; see :meth:`rate`)."""
        model = self.contention_model
        if self.family == PhysicsFamily.CONVEX_MEMBW:
            if not node.cpu:
                return 0.0
            demand = sum(cpu * self.membw.get(kind, 1.0) for kind, cpu in node.kind_cpu.items())
            return model.membw_amplitude * (max(0.0, demand) / node.cpu) ** model.membw_exponent
        if self.family == PhysicsFamily.PAIRWISE:
            return 0.0
        u = node.cpu_alloc / node.cpu if node.cpu else 0.0
        return model.amplitude * min(1.0, max(0.0, (u - model.knee) / (1.0 - model.knee)))

    def rate(self, rep: SimReplica, node: SimNode, c: float) -> float:
        """The replica's progress rate (nominal seconds per second) at contention ``c``."""
        if self.family == PhysicsFamily.PAIRWISE:
            return 1.0 / self._pairwise_slowdown(rep, node)
        slow = 1.0 + rep.sens * c
        if rep.io and node.io_count > 1:
            slow *= 1.0 + self.contention_model.io_penalty * (node.io_count - 1)
        return 1.0 / slow

    def _pairwise_slowdown(self, rep: SimReplica, node: SimNode) -> float:
        """``1 + sum_B M[kind, B] * (CPU of the replica's neighbours of kind B) / node CPU``."""
        if not node.cpu:
            return 1.0
        kind = rep.task.spec.kind
        own = rep.assignment.cpu if (rep.task.spec.id, rep.index) in node.replicas else 0.0
        slow = 1.0
        for neighbour, effect in self.pairwise.get(kind, ()):
            cpu = node.kind_cpu.get(neighbour, 0.0) - (own if neighbour == kind else 0.0)
            slow += effect * max(0.0, cpu) / node.cpu
        return slow

    def change_load(self, node: SimNode, now: float, apply: Callable[[], None]) -> list[SimReplica]:
        """Settle progress at the old rates, change the node's load, then re-rate its replicas.

        Returns the replicas whose rate changed (their version bumped), in node order: their
        finish events must be scheduled again.
        """
        self.advance(node, now)
        before_c = self.contention(node)
        before_io = node.io_count
        u = node.cpu_alloc / node.cpu if node.cpu else 0.0
        load_bin = min(LOAD_BINS - 1, max(0, int(u * LOAD_BINS)))
        for rep in node.replicas.values():
            dt = now - rep.last
            rep.work_left -= dt * rep.rate
            rep.load_t[load_bin] += dt
            if rep.io:
                rep.io_t += dt * (before_io - 1)
            rep.last = now
        apply()
        after_c = self.contention(node)
        rerated: list[SimReplica] = []
        if self.mix_rated or after_c != before_c or node.io_count != before_io:
            for rep in node.replicas.values():
                rate = self.rate(rep, node, after_c)
                if rate != rep.rate:
                    rep.rate = rate
                    rep.version += 1
                    rerated.append(rep)
        repower(node)
        return rerated


def occupy(node: SimNode, rep: SimReplica) -> None:
    """Add a starting replica's load to its node."""
    assignment = rep.assignment
    node.replicas[(rep.task.spec.id, rep.index)] = rep
    node.cpu_alloc += assignment.cpu
    node.mem_alloc += assignment.memory
    node.gpu_units += gpu_units(assignment)
    node.dpus_busy += len(assignment.dpus)
    kind = rep.task.spec.kind
    node.kind_cpu[kind] = node.kind_cpu.get(kind, 0.0) + assignment.cpu
    if rep.io:
        node.io_count += 1


def vacate(node: SimNode, rep: SimReplica, now: float) -> None:
    """Take a stopping replica's load off its node (an emptied node is idle from ``now``)."""
    a = rep.assignment
    node.replicas.pop((rep.task.spec.id, rep.index), None)
    node.cpu_alloc = max(0.0, node.cpu_alloc - a.cpu)
    node.mem_alloc = max(0.0, node.mem_alloc - a.memory)
    node.gpu_units = max(
        0.0, node.gpu_units - len(a.gpus) - sum(_MIG_COMPUTE[s.profile] for s in a.mig) / 7.0
    )
    node.dpus_busy -= len(a.dpus)
    kind = rep.task.spec.kind
    node.kind_cpu[kind] = max(0.0, node.kind_cpu.get(kind, 0.0) - a.cpu)
    if rep.io:
        node.io_count -= 1
    if not node.replicas:
        node.idle_since = now
