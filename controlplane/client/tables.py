"""The table of each resource ``controlplane get`` and ``top`` print: its header and one row per
API item (the item is the API's JSON, as ``-o json`` prints it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.client.render import age, cpu, memory, percent

__all__ = ["RESOURCES", "TOP_NODES", "Resource", "TableSpec", "gpu_capacity", "node_status"]

Row = Sequence[Any]


@dataclass(frozen=True, slots=True)
class TableSpec:
    header: tuple[str, ...]
    row: Callable[[dict[str, Any]], Row]


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind ``get`` lists: its API path, whether one item can be fetched by name, its table;
    the query filters its list takes, its ``-o wide`` table and what ``-o name`` prints."""

    path: str
    by_name: bool
    paged: bool  # the API takes limit/offset (the others are cut here)
    table: TableSpec
    filters: tuple[str, ...] = ()  # query parameters of the list, as ``get --<filter>`` sets them
    wide: TableSpec | None = None  # ``-o wide`` (default: the table)
    singular: str = ""  # ``-o name`` prints singular/key
    key: str = "name"

    def name_of(self, item: dict[str, Any]) -> str:
        """The item as ``-o name`` prints it, kubectl's ``kind/name``."""
        return f"{self.singular}/{item.get(self.key)}"


def gpu_capacity(node: dict[str, Any]) -> int:
    gpus = (node.get("resources") or {}).get("gpus")
    return len(gpus) if isinstance(gpus, list) else int(gpus or 0)


def _battery(node: dict[str, Any]) -> str:
    level = (node.get("power") or {}).get("battery_percent")
    return f"{level:.0f}%" if isinstance(level, int | float) else "-"


def node_status(node: dict[str, Any]) -> str:
    """The node's status, kubectl-style with its condition: ``NotReady,Revoked``."""
    status = str(node.get("status"))
    return f"{status},Revoked" if node.get("revoked") else status


def _node_row(n: dict[str, Any]) -> Row:
    resources = n.get("resources") or {}
    return (
        n.get("name"),
        node_status(n),
        n.get("cluster"),
        n.get("node_type"),
        cpu(resources.get("cpu")),
        memory(resources.get("memory")),
        gpu_capacity(n),
        (n.get("power") or {}).get("source"),
        _battery(n),
        age(n.get("last_heartbeat_at")),
    )


def _workload_row(w: dict[str, Any]) -> Row:
    return (
        w.get("id"),
        w.get("name"),
        w.get("status"),
        w.get("replicas"),
        w.get("nodes"),
        w.get("restarts"),
        w.get("exit_code"),
        age(w.get("created_at")),
    )


def _wide_workload_row(w: dict[str, Any]) -> Row:
    clusters = sorted({p.get("cluster") for p in w.get("placements") or [] if p.get("cluster")})
    return (*_workload_row(w), w.get("priority"), clusters, w.get("message"))


_WORKLOAD_HEADER = ("ID", "NAME", "STATUS", "REPLICAS", "NODES", "RESTARTS", "EXIT", "AGE")


def _function_row(f: dict[str, Any]) -> Row:
    spec, stats = f.get("spec") or {}, f.get("stats") or {}
    rate = stats.get("cold_start_rate")
    return (
        f.get("name"),
        f.get("version"),
        spec.get("runtime"),
        memory(spec.get("memory")),
        len(f.get("instances") or []),
        stats.get("invocations"),
        f"{100 * rate:.0f}%" if isinstance(rate, int | float) else None,
        (stats.get("latency_ms") or {}).get("p50"),
        (stats.get("latency_ms") or {}).get("p99"),
        stats.get("errors"),
    )


def _cluster_row(c: dict[str, Any]) -> Row:
    return (c.get("name"), c.get("region"), c.get("status"), c.get("nodes"), c.get("ready_nodes"))


def _event_row(e: dict[str, Any]) -> Row:
    what = f"{e.get('object_kind')}/{e.get('object_id')}"
    return (e.get("id"), e.get("time"), e.get("kind"), what, e.get("message"))


RESOURCES: dict[str, Resource] = {
    "nodes": Resource(
        "/v1/nodes",
        True,
        True,
        TableSpec(
            ("NAME", "STATUS", "CLUSTER", "TYPE", "CPU", "MEMORY", "GPUS", "POWER", "BATTERY", "HEARTBEAT"),
            _node_row,
        ),
        filters=("status", "cluster"),
        singular="node",
    ),
    "workloads": Resource(
        "/v1/workloads",
        True,
        True,
        TableSpec(_WORKLOAD_HEADER, _workload_row),
        filters=("status", "name", "node", "cluster"),
        wide=TableSpec((*_WORKLOAD_HEADER, "PRIORITY", "CLUSTERS", "MESSAGE"), _wide_workload_row),
        singular="workload",
        key="id",
    ),
    "functions": Resource(
        "/v1/functions",
        True,
        False,
        TableSpec(
            (
                "NAME",
                "VERSION",
                "RUNTIME",
                "MEMORY",
                "INSTANCES",
                "INVOCATIONS",
                "COLD",
                "P50 MS",
                "P99 MS",
                "ERRORS",
            ),
            _function_row,
        ),
        singular="function",
    ),
    "clusters": Resource(
        "/v1/clusters",
        False,
        False,
        TableSpec(("NAME", "REGION", "STATUS", "NODES", "READY"), _cluster_row),
        singular="cluster",
    ),
    "events": Resource(
        "/v1/events",
        False,
        False,
        TableSpec(("ID", "TIME", "KIND", "OBJECT", "MESSAGE"), _event_row),
        singular="event",
        key="id",
    ),
}


def _used(allocated: Any, capacity: Any, fmt: Callable[[Any], str]) -> str:
    return f"{fmt(allocated)}/{fmt(capacity)} ({percent(allocated, capacity)})"


def _top_row(n: dict[str, Any]) -> Row:
    resources, allocated = n.get("resources") or {}, n.get("allocated") or {}
    mig = len(allocated.get("mig") or [])
    gpus = f"{allocated.get('gpus', 0)}/{gpu_capacity(n)}" + (f" +{mig} MIG" if mig else "")
    telemetry = n.get("telemetry") or {}
    w3 = (n.get("weights") or {}).get("w3")
    return (
        n.get("name"),
        node_status(n),
        _used(allocated.get("cpu", 0), resources.get("cpu"), cpu),
        _used(allocated.get("memory", 0), resources.get("memory"), memory),
        gpus,
        f"{telemetry['cpu_percent']:.0f}%" if isinstance(telemetry.get("cpu_percent"), int | float) else None,
        (n.get("power") or {}).get("source"),
        _battery(n),
        f"{w3:g}" if isinstance(w3, int | float) else None,
    )


TOP_NODES = TableSpec(
    ("NAME", "STATUS", "CPU (ALLOC/CAP)", "MEMORY (ALLOC/CAP)", "GPUS", "CPU USED", "POWER", "BATTERY", "W3"),
    _top_row,
)
