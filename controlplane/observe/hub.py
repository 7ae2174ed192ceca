"""One hub's metrics: its registry, what the hub counts as it goes (bid rounds, lease expiries), and
what is read from its live state when Prometheus scrapes (nodes, power, allocation, the NATS bus,
function instances): that state is the hub's own, never copied into gauges that could drift."""

from __future__ import annotations

import platform
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from edgeplane_contract.messages import FunctionInstance

from controlplane import __version__
from controlplane.bus.hub_bus import HubBus
from controlplane.federation.config import FederationConfig
from controlplane.fleet.energy import EnergyMeter
from controlplane.fleet.nodes import NodeLive
from controlplane.observe.functions import FunctionMetrics
from controlplane.observe.scheduler import SchedulerMetrics
from controlplane.scheduling.interference import InterferenceEstimate
from controlplane.scheduling.sla_risk import SHOWN_RATIO, SlaRiskTable

__all__ = ["BidMetrics", "HubMetrics", "HubView", "InterferenceView"]

NODE_STATUSES = ("Ready", "NotReady")  # always exported, 0 when no node has them


class PlacementView(Protocol):
    def allocated(self, node: str) -> dict[str, Any]: ...
    def capacity(self, node: str) -> dict[str, Any]: ...


class InstanceView(Protocol):
    @property
    def instances(self) -> Mapping[str, Mapping[str, FunctionInstance]]: ...
    @property
    def counters(self) -> Mapping[str, int]: ...


class HubView(Protocol):
    """What the scrape reads of a hub (``hub.service.Hub`` is one)."""

    @property
    def nodes(self) -> dict[str, NodeLive]: ...
    @property
    def bus(self) -> HubBus: ...
    @property
    def federation(self) -> FederationConfig: ...
    @property
    def placer(self) -> PlacementView: ...
    @property
    def functions(self) -> InstanceView: ...
    @property
    def cordoned(self) -> set[str]: ...
    @property
    def descheduler(self) -> Any: ...
    @property
    def energy(self) -> EnergyMeter: ...


class InterferenceView(Protocol):
    """What the scrape reads of live interference learning (``hub.learning`` is one)."""

    @property
    def outcomes(self) -> Mapping[str, int]: ...
    def estimate(self) -> InterferenceEstimate | None: ...
    def risk(self) -> SlaRiskTable | None: ...


class BidMetrics:
    """The bid round (``hub.bidding``): nodes asked, and what came of each question."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter(
            "edgeplane_bid_rounds",
            "Bid rounds run, by what decided the winner",
            ["decided_by"],
            registry=registry,
        )
        self.asked = Counter("edgeplane_bids_asked", "Nodes asked for a bid", registry=registry)
        self.answered = Counter("edgeplane_bids_answered", "Bids received in time", registry=registry)
        self.declined = Counter("edgeplane_bids_declined", "Bids that declined the work", registry=registry)
        self.timed_out = Counter(
            "edgeplane_bids_timed_out",
            "Nodes asked that gave no valid bid within the deadline (the hub's estimate stood in)",
            registry=registry,
        )

    def round(self, decided_by: str, *, asked: int, answered: int, declined: int) -> None:
        self.rounds.labels(decided_by).inc()
        self.asked.inc(asked)
        self.answered.inc(answered)
        self.declined.inc(declined)
        self.timed_out.inc(asked - answered)


class HubMetrics:
    """A hub's registry and the metric groups its parts feed; :meth:`watch` adds the scrape-time
    view of the hub itself."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.scheduler = SchedulerMetrics(self.registry)
        self.functions = FunctionMetrics(self.registry)
        self.bids = BidMetrics(self.registry)
        self.placement_model_decisions = Counter(
            "edgeplane_placement_model_decisions",
            "Replicas whose node the placement model (--placement-model) picked",
            registry=self.registry,
        )
        self.lease_expiries = Counter(
            "edgeplane_lease_expiries",
            "Nodes that went NotReady because their lease ran out (missed heartbeats)",
            ["cluster"],
            registry=self.registry,
        )
        # Receive time minus the agent's sent_at (clamped at 0: the clocks are the agents').
        self.heartbeat_lag = Histogram(
            "edgeplane_heartbeat_lag_seconds",
            "How late the hub handles a heartbeat after its agent sent it",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )
        # The hub process's CPU, memory, open fds and start time (process_*), as every Prometheus
        # exporter has them; in this registry, since the default one is not served.
        ProcessCollector(registry=self.registry)
        # edgeplane_build_info{version, python} 1: which build a series came from (upgrades).
        Info("edgeplane_build", "The hub's build: edgeplane version and Python", registry=self.registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        self._watched = False
        self._watched_interference = False

    def watch(self, hub: HubView) -> None:
        """Read ``hub``'s live state at every scrape (once per registry)."""
        if not self._watched:
            self.registry.register(HubCollector(hub))
            self._watched = True

    def watch_interference(self, learning: InterferenceView) -> None:
        """Read the interference estimate at every scrape (once per registry)."""
        if not self._watched_interference:
            self.registry.register(InterferenceCollector(learning))
            self._watched_interference = True


def _gauge(name: str, doc: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class HubCollector(Collector):
    """Nodes as the hub sees them, its NATS connections and the function instances, at scrape time."""

    def __init__(self, hub: HubView) -> None:
        self.hub = hub

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield from self._nodes()
        yield from self._bus()
        yield from self._instances()
        yield from self._energy()

    def _energy(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "edgeplane_node_energy_joules",
            "Energy the nodes drew, from their heartbeats' power (method: battery, rapl or model)",
            labels=["cluster", "node", "method"],
        )
        for (node, method), joules in sorted(self.hub.energy.node_joules.items()):
            live = self.hub.nodes.get(node)
            family.add_metric([live.cluster if live is not None else "", node, method], joules)
        yield family

    def _nodes(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        hub = self.hub
        by_status = Tally({status: 0 for status in NODE_STATUSES})
        per_node = ("node", "cluster")
        ready = _gauge("edgeplane_node_ready", "1 when the node is Ready", per_node)
        battery = _gauge("edgeplane_node_on_battery", "1 when the node runs on battery", per_node)
        level = _gauge("edgeplane_node_battery_percent", "Battery level (nodes that report one)", per_node)
        w3 = _gauge(
            "edgeplane_node_energy_weight", "The node's energy weight w3 (rises on battery)", per_node
        )
        cpu = _gauge("edgeplane_node_cpu_allocated_cores", "CPU cores held by placements", per_node)
        cpu_cap = _gauge("edgeplane_node_cpu_capacity_cores", "CPU cores the node offers", per_node)
        mem = _gauge("edgeplane_node_memory_allocated_bytes", "Memory held by placements", per_node)
        mem_cap = _gauge("edgeplane_node_memory_capacity_bytes", "Memory the node offers", per_node)
        gpus = _gauge("edgeplane_node_gpus_allocated", "Whole GPUs held by placements", per_node)
        gpu_cap = _gauge("edgeplane_node_gpus", "GPUs the node offers", per_node)
        mig = _gauge("edgeplane_node_mig_slices_allocated", "MIG slices held by placements", per_node)
        cordoned = _gauge(
            "edgeplane_node_cordoned", "1 while the descheduler keeps new work off the node", per_node
        )
        policy = _gauge(
            "edgeplane_node_policy_version",
            "The local policy version the node decides with (0: the model it shipped with)",
            per_node,
        )
        for live in hub.nodes.values():
            by_status[live.status] += 1
            labels = [live.name, live.cluster]
            ready.add_metric(labels, 1.0 if live.status == "Ready" else 0.0)
            battery.add_metric(labels, 1.0 if live.power_source == "battery" else 0.0)
            if live.battery_percent is not None:
                level.add_metric(labels, float(live.battery_percent))
            weights = live.telemetry.get("weights") or []
            if len(weights) >= 3:
                w3.add_metric(labels, float(weights[2]))
            held = hub.placer.allocated(live.name)
            offered = hub.placer.capacity(live.name)
            cpu.add_metric(labels, float(held.get("cpu", 0.0)))
            mem.add_metric(labels, float(held.get("memory", 0)))
            gpus.add_metric(labels, float(held.get("gpus", 0)))
            mig.add_metric(labels, float(len(held.get("mig", []))))
            cpu_cap.add_metric(labels, float(offered.get("cpu", 0.0)))
            mem_cap.add_metric(labels, float(offered.get("memory", 0)))
            gpu_cap.add_metric(labels, float(offered.get("gpus", 0)))
            policy.add_metric(labels, float(live.policy_version or 0))
            cordoned.add_metric(labels, 1.0 if live.name in hub.cordoned else 0.0)
        nodes = _gauge("edgeplane_nodes", "Nodes known to the hub, by status", ["status"])
        for status, count in sorted(by_status.items()):
            nodes.add_metric([status], float(count))
        moves = CounterMetricFamily(
            "edgeplane_descheduler_moves", "Replicas moved off anomalous nodes (hub/descheduler.py)"
        )
        moves.add_metric([], float(hub.descheduler.moves))
        budget_held = CounterMetricFamily(
            "edgeplane_descheduler_held_by_budget", "Moves the disruption budget held back, pass by pass"
        )
        budget_held.add_metric([], float(hub.descheduler.held_by_budget))
        yield from (nodes, ready, battery, level, w3, cpu, cpu_cap, mem, mem_cap, gpus, gpu_cap, mig, policy)
        yield from (cordoned, moves, budget_held)

    def _bus(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        bus = self.hub.bus
        clusters = [c.name for c in self.hub.federation.clusters]
        connected = _gauge("edgeplane_bus_connected", "1 while the hub's NATS connection is up", ["cluster"])
        reconnects = CounterMetricFamily(
            "edgeplane_bus_reconnects",
            "Times the NATS connection came back after a break",
            labels=["cluster"],
        )
        for cluster in clusters:
            connected.add_metric([cluster], 1.0 if bus.hearing_since(cluster) is not None else 0.0)
            reconnects.add_metric([cluster], float(bus.reconnects(cluster)))
        malformed = CounterMetricFamily(
            "edgeplane_bus_malformed_messages",
            "Messages that could not be decoded (counted, logged, dropped), by kind",
            labels=["kind"],
        )
        for kind, count in sorted(bus.malformed.items()):
            malformed.add_metric([kind], float(count))
        rejected = CounterMetricFamily(
            "edgeplane_bus_rejected_messages",
            "Well-formed messages the hub refused (wrong node, not enrolled), by kind",
            labels=["kind"],
        )
        for kind, count in sorted(bus.rejected.items()):
            rejected.add_metric([kind], float(count))
        yield from (connected, reconnects, malformed, rejected)

    def _instances(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        counts: Tally[tuple[str, str]] = Tally()
        for known in self.hub.functions.instances.values():
            for instance in known.values():
                counts[(instance.function, instance.state)] += 1
        family = _gauge(
            "edgeplane_function_instances",
            "Function instances the agents report, by function and state",
            ["function", "state"],
        )
        for (function, state), count in sorted(counts.items()):
            family.add_metric([function, state], float(count))
        yield family
        started = CounterMetricFamily(
            "edgeplane_function_prewarmed_instances",
            "Instances agents started ahead of arrivals at the hub's request, by why (window: the "
            "keep-alive policy's predicted arrival or the call graph; spare: a predicted overlap; "
            "forecast: a bin's forecast arrivals)",
            labels=["why"],
        )
        counters = self.hub.functions.counters
        for why, key in (("window", "prewarms"), ("spare", "spares"), ("forecast", "forecast_prewarms")):
            started.add_metric([why], float(counters.get(key, 0)))
        yield started


class InterferenceCollector(Collector):
    """The interference estimate learned from the agents' observations, at scrape time (the
    estimate is refitted only when an observation arrived since the last scrape)."""

    def __init__(self, learning: InterferenceView) -> None:
        self.learning = learning

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        outcomes = CounterMetricFamily(
            "edgeplane_interference_reports",
            "Runtime observations that successes carried, by what became of them (learned; "
            "no_baseline: no expected runtime yet; ignored: the estimator took nothing from it; "
            "invalid: malformed, dropped)",
            labels=["outcome"],
        )
        for outcome, count in sorted(self.learning.outcomes.items()):
            outcomes.add_metric([outcome], float(count))
        yield outcomes
        estimate = self.learning.estimate()
        if estimate is None:  # the hub's profile does not learn interference
            return
        knee = _gauge("edgeplane_interference_knee", "Learned CPU-load knee where slowdown starts", [])
        knee.add_metric([], estimate.knee)
        sensitivity = _gauge(
            "edgeplane_interference_sensitivity",
            "Learned slowdown sensitivity above the knee, by kind",
            ["kind"],
        )
        sensitivity_sd = _gauge(
            "edgeplane_interference_sensitivity_sd",
            "Posterior standard deviation of the sensitivity",
            ["kind"],
        )
        for kind in sorted(estimate.sensitivity):
            sensitivity.add_metric([kind], estimate.sensitivity[kind])
            sensitivity_sd.add_metric([kind], estimate.sensitivity_sd.get(kind, 0.0))
        observations = _gauge(
            "edgeplane_interference_observations",
            "Observations in the estimate (replayed from the store at start included), by kind",
            ["kind"],
        )
        for kind, count in sorted(estimate.observations.items()):
            observations.add_metric([kind], float(count))
        yield from (knee, sensitivity, sensitivity_sd, observations)
        yield from _sla_risk(self.learning.risk())


def _sla_risk(table: SlaRiskTable | None) -> Iterator[GaugeMetricFamily]:
    """The learned SLA-miss risk at 1.5x the expected runtime, by kind and tenth of node load."""
    if table is None:  # the hub's profile does not weigh it
        return
    risk = _gauge(
        "edgeplane_sla_risk",
        "Learned chance that a replica runs longer than 1.5x its expected runtime, by kind and "
        "node load (the lower bound of its tenth)",
        ["kind", "load"],
    )
    for kind, values in table.by_load(SHOWN_RATIO).items():
        for tenth, value in enumerate(values):
            risk.add_metric([kind, f"{tenth / 10:.1f}"], value)
    yield risk
