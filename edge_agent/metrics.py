"""The agent's ``/metrics`` (Prometheus text format), served on ``metrics_listen`` when it is set.

Everything is read from the agent's own state when Prometheus scrapes (its counters, the process
runner, the function pool, the outbox, the link to the hub, the power supply): nothing is counted
twice, and the hot paths are untouched. One registry per agent (tests run several in a process).
Names are tabled in docs/metrics.md.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from edgeplane_contract.messages import FunctionInstance
from edgeplane_contract.objective import RewardConfig

from edge_agent.telemetry.power import PowerState
from edge_agent.weights import current_weights

__all__ = ["PREFIX", "AgentCollector", "AgentState", "MetricsServer", "agent_registry"]

log = logging.getLogger("edgeplane.agent.metrics")

PREFIX = "edgeplane_agent_"


@dataclass(slots=True)
class AgentState:
    """How the collector reads an agent: callables, so that each scrape sees the state of now."""

    node: str
    cluster: str
    counters: Counter[str]
    function_counters: dict[str, int]
    running: Callable[[], int]
    instances: Callable[[], list[FunctionInstance]]
    outbox_depth: Callable[[], int]
    hub_reachable: Callable[[], bool]
    power: Callable[[], PowerState]
    reward: Callable[[], RewardConfig]


def _gauge(name: str, doc: str, value: float, labels: list[str], values: list[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, doc, labels=labels)
    family.add_metric(values, value)
    return family


def _counter(name: str, doc: str, value: float, labels: list[str], values: list[str]) -> CounterMetricFamily:
    family = CounterMetricFamily(PREFIX + name, doc, labels=labels)
    family.add_metric(values, value)
    return family


class AgentCollector(Collector):
    """One agent's series, each labelled with its node (Prometheus adds the scrape target too)."""

    def __init__(self, state: AgentState) -> None:
        self.state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        st = self.state
        node = ["node"]
        at = [st.node]
        yield _gauge(
            "info", "The agent's node and cluster (always 1)", 1.0, ["node", "cluster"], [st.node, st.cluster]
        )
        yield _gauge("workloads_running", "Placements whose process runs here", float(st.running()), node, at)
        by_state: Counter[tuple[str, str]] = Counter((i.function, i.state) for i in st.instances())
        instances = GaugeMetricFamily(
            PREFIX + "function_instances",
            "Function instances, by function and state",
            labels=[*node, "function", "state"],
        )
        for (function, state), count in sorted(by_state.items()):
            instances.add_metric([st.node, function, state], float(count))
        yield instances
        counted = (
            ("invocations", st.counters["invocations"], "Invocations received from the hub"),
            (
                "cold_starts",
                st.function_counters.get("cold_starts", 0),
                "Function instances started (cold starts)",
            ),
            (
                "warm_starts",
                st.function_counters.get("warm_starts", 0),
                "Invocations served by a warm instance",
            ),
            ("heartbeats_sent", st.counters["heartbeats"], "Heartbeats published to the hub"),
            ("reconnects", st.counters["reconnects"], "Times the NATS connection came back"),
            (
                "malformed_messages",
                st.counters["malformed_messages"],
                "Messages from the hub that could not be decoded",
            ),
            ("bids", st.counters["bids"], "Bid requests the local policy answered"),
        )
        for name, value, doc in counted:
            yield _counter(name, doc, float(value), node, at)
        yield _gauge(
            "outbox_depth",
            "State reports waiting to be acknowledged by the hub",
            float(st.outbox_depth()),
            node,
            at,
        )
        yield _gauge(
            "hub_reachable",
            "1 while the agent is connected to NATS",
            1.0 if st.hub_reachable() else 0.0,
            node,
            at,
        )
        power = st.power()
        yield _gauge(
            "on_battery",
            "1 when the node runs on battery",
            1.0 if power.source == "battery" else 0.0,
            node,
            at,
        )
        if power.battery_percent is not None:
            yield _gauge("battery_percent", "Battery level", float(power.battery_percent), node, at)
        w3 = current_weights(st.reward(), power)[2]
        yield _gauge(
            "energy_weight", "The energy weight w3 the node uses now (rises on battery)", w3, node, at
        )


def agent_registry(state: AgentState) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(AgentCollector(state))
    return registry


class MetricsServer:
    """``GET /metrics`` on ``host:port`` (port 0: any free one; :attr:`url` says which)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.url = ""
        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(registry))
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            # The node's work matters more than its metrics: said loudly, and the agent goes on.
            log.error("cannot serve metrics on %s:%d: %s", self.host, self.port, exc.strerror or exc)
            return
        server = getattr(site, "_server", None)
        bound = server.sockets[0].getsockname()[1] if server and server.sockets else self.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{bound}/metrics"
        log.info("metrics at %s", self.url)

    async def stop(self) -> None:
        await self._runner.cleanup()
