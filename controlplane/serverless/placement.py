"""Which nodes may run a function, and how warm each is: the options the router prices.

Where an instance fits is the placement engine's answer (the scheduling framework's filters, the
``functions`` profile: readiness, free capacity after the workloads' reservations, affinity), the
same engine that places workloads; this module adds what only the function service knows: the
instances agents report and the invocations the hub dispatched since their last heartbeat.
"""

from __future__ import annotations

from collections import Counter

from edgeplane_contract.messages import FunctionInstance

from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.estimates import Estimates
from controlplane.serverless.router import NodeOption
from controlplane.serverless.spec import FunctionSpec

__all__ = ["node_options", "unplaceable_reason"]


def node_options(
    hub: FunctionHost,
    spec: FunctionSpec,
    exclude: set[str],
    *,
    instances: dict[str, dict[str, FunctionInstance]],
    in_flight: Counter[tuple[str, str, int]],
    estimates: Estimates,
    assume_fit: bool = False,
) -> list[NodeOption]:
    """One option per Ready node outside ``exclude`` where a new instance of ``spec`` fits or
    one already runs (a warm instance serves even when the node has no room for another).

    ``assume_fit``: skip the placement engine's filters and let every Ready node start one (an
    upper bound of the cold-start options, for a caller that asks again when it picks one)."""
    fits = None if assume_fit else set(hub.function_nodes(spec.instance_request()).nodes)
    options = []
    for name, live in hub.nodes.items():
        if live.status != "Ready" or name in exclude:
            continue
        can_start = fits is None or name in fits
        mine = [
            i
            for i in instances.get(name, {}).values()
            if (i.function, i.version) == (spec.name, spec.version)
        ]
        if not can_start and not mine:
            continue
        assert spec.version is not None
        dispatched = in_flight[(name, spec.name, spec.version)]
        slots = sum(i.max_concurrency for i in mine if i.state != "starting")
        starting = sum(i.max_concurrency for i in mine if i.state == "starting")
        taken = max(sum(i.in_flight for i in mine), dispatched)
        free = max(0, slots - taken)
        options.append(
            NodeOption(
                node=name,
                warm_free=free,
                free_slots=max(0, slots + starting - taken),
                busy_instances=len(mine) if free == 0 else 0,
                can_start=can_start,
                net_ms=estimates.net_ms(name),
                cold_ms=estimates.cold_ms(spec.name, name),
                in_flight=sum(n for (node, _, _), n in in_flight.items() if node == name),
                power_source=live.power_source,
                battery_percent=live.battery_percent,
            )
        )
    return options


def unplaceable_reason(hub: FunctionHost, spec: FunctionSpec) -> str:
    """Why no node can take an instance of ``spec`` now, as the filters say it ("" if one can)."""
    return hub.function_nodes(spec.instance_request()).reason
