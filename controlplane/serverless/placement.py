"""Which nodes may run a function, and how warm each is: the options the router prices.

A pure function of the hub's view (nodes, capacity, federation), the instances agents report and
the invocations the hub dispatched since their last heartbeat.
"""

from __future__ import annotations

from collections import Counter

from edgeplane_contract.messages import FunctionInstance

from controlplane.hub.nodes import FunctionHost
from controlplane.serverless.estimates import Estimates
from controlplane.serverless.router import NodeOption
from controlplane.serverless.spec import FunctionSpec

__all__ = ["allowed", "node_options"]


def node_options(
    hub: FunctionHost,
    spec: FunctionSpec,
    exclude: set[str],
    *,
    instances: dict[str, dict[str, FunctionInstance]],
    in_flight: Counter[tuple[str, str, int]],
    estimates: Estimates,
) -> list[NodeOption]:
    """One option per Ready node outside ``exclude`` that may run ``spec`` and has room for it."""
    options = []
    for name, live in hub.nodes.items():
        if live.status != "Ready" or name in exclude:
            continue
        if not allowed(hub, spec, name, live.cluster):
            continue
        capacity = hub.node_capacity(name)
        if capacity.get("memory", 0) < spec.memory:
            continue
        if spec.gpu and capacity.get("gpus", 0) < spec.gpu:
            continue
        mine = [
            i
            for i in instances.get(name, {}).values()
            if (i.function, i.version) == (spec.name, spec.version)
        ]
        assert spec.version is not None
        dispatched = in_flight[(name, spec.name, spec.version)]
        slots = sum(i.max_concurrency for i in mine if i.state != "starting")
        reported_busy = sum(i.in_flight for i in mine)
        free = max(0, slots - max(reported_busy, dispatched))
        options.append(
            NodeOption(
                node=name,
                warm_free=free,
                busy_instances=len(mine) if free == 0 else 0,
                can_start=True,
                net_ms=estimates.net_ms(name),
                cold_ms=estimates.cold_ms(spec.name, name),
                in_flight=sum(n for (node, _, _), n in in_flight.items() if node == name),
                power_source=live.power_source,
                battery_percent=live.battery_percent,
            )
        )
    return options


def allowed(hub: FunctionHost, spec: FunctionSpec, node: str, cluster: str) -> bool:
    """Whether the function's affinity (nodes, clusters, regions) lets it run on ``node``."""
    affinity = spec.affinity
    if affinity.nodes and node not in affinity.nodes:
        return False
    if affinity.clusters and cluster not in affinity.clusters:
        return False
    if affinity.regions:
        config = hub.federation.cluster(cluster)
        if config is None or config.region not in affinity.regions:
            return False
    return True
