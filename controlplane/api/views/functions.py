"""Functions (versions, instances, counters, keep-alive) and their invocations."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Annotated, Any

from controlplane.api.views.base import DateTime, OptionalDateTime, iso, one_of
from controlplane.serverless.estimates import FunctionStats
from controlplane.serverless.service import FunctionService
from controlplane.serverless.spec import FunctionSpec
from controlplane.store.models import InvocationRow
from controlplane.typeschema import StoredAs

__all__ = [
    "Deleted",
    "Function",
    "FunctionCounters",
    "FunctionInstance",
    "FunctionList",
    "Invocation",
    "KeepAlive",
    "Percentiles",
    "Queued",
]

INVOCATION_STATUSES = ("Queued", "Running", "Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class FunctionInstance:
    """A warm (or warming) instance an agent reported, or the hub dispatched since."""

    node: str
    instance_id: str
    version: int
    # No enum: the agent names the state (starting, idle, busy, stopped...) and the contract does
    # not check it.
    state: str
    in_flight: int
    age_s: float | None
    idle_s: float | None
    keep_alive_s: float
    cold_start_ms: float


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class FunctionCounters:
    invocations: int
    cold_starts: int
    cold_start_rate: float | None
    errors: int
    timeouts: int
    latency_ms: Percentiles
    cold_start_ms: Percentiles
    per_node: dict[str, dict[str, int]]

    @classmethod
    def of(cls, stats: FunctionStats) -> FunctionCounters:
        p = stats.percentile
        return cls(
            invocations=stats.invocations,
            cold_starts=stats.cold_starts,
            cold_start_rate=round(stats.cold_starts / stats.invocations, 4) if stats.invocations else None,
            errors=stats.errors,
            timeouts=stats.timeouts,
            latency_ms=Percentiles(p(stats.latencies_ms, 0.5), p(stats.latencies_ms, 0.99)),
            cold_start_ms=Percentiles(p(stats.cold_start_ms, 0.5), p(stats.cold_start_ms, 0.99)),
            per_node=stats.per_node,
        )


@dataclass(frozen=True, slots=True)
class KeepAlive:
    """The keep-alive policy, and the window it would give an instance going idle now."""

    name: str
    keep_alive_s: float
    prewarm_after_s: float


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    version: int
    versions: list[int]
    spec: Annotated[dict[str, Any], StoredAs(FunctionSpec)]
    instances: list[FunctionInstance]
    stats: FunctionCounters
    policy: KeepAlive

    @classmethod
    def of(cls, functions: FunctionService, name: str) -> Function:
        """The latest version of ``name`` (NotFoundError if none) and what the service knows of it."""
        spec = functions.resolve(name)
        assert spec.version is not None  # a registered version is numbered
        now = time.time()
        instances = [
            FunctionInstance(
                node=node,
                instance_id=i.instance_id,
                version=i.version,
                state=i.state,
                in_flight=i.in_flight,
                age_s=round(now - i.started_at, 3) if i.started_at else None,
                idle_s=round(now - i.last_used_at, 3) if i.state == "idle" and i.last_used_at else None,
                keep_alive_s=i.keep_alive_s,
                cold_start_ms=round(i.cold_start_ms, 3),
            )
            for node, known in sorted(functions.instances.items())
            for i in known.values()
            if i.function == name
        ]
        window = functions.policy.keepalive.release_window(name, asyncio.get_running_loop().time())
        return cls(
            name=name,
            version=spec.version,
            versions=sorted(functions.specs[name]),
            spec=spec.to_dict(),
            instances=instances,
            stats=FunctionCounters.of(functions.stats.get(name, FunctionStats())),
            policy=KeepAlive(
                name=functions.policy.name,
                keep_alive_s=window.keep_alive_s,
                prewarm_after_s=window.prewarm_s,
            ),
        )


@dataclass(frozen=True, slots=True)
class FunctionList:
    items: list[Function]
    total: int


@dataclass(frozen=True, slots=True)
class Deleted:
    """``DELETE /v1/functions/{name}``."""

    name: str
    deleted: bool


@dataclass(frozen=True, slots=True)
class Queued:
    """An asynchronous invocation accepted (202), or the one a retried Idempotency-Key names (200)."""

    invocation_id: str
    status: Annotated[str, one_of(INVOCATION_STATUSES)]
    poll: str


@dataclass(frozen=True, slots=True)
class Invocation:
    id: str
    function: str
    version: int
    status: Annotated[str, one_of(INVOCATION_STATUSES)]
    node: str | None
    cold_start: bool | None
    result: Annotated[Any, {"description": "the handler's JSON result"}]
    error: dict[str, Any] | None
    timings: dict[str, Any]
    created_at: DateTime
    finished_at: OptionalDateTime

    @classmethod
    def of(cls, row: InvocationRow) -> Invocation:
        return cls(
            id=row.id,
            function=row.function,
            version=row.version,
            status=row.status,
            node=row.node,
            cold_start=row.cold_start,
            result=row.result.get("value") if row.result else None,
            error=row.error or None,
            timings=row.timings,
            created_at=iso(row.created_at),
            finished_at=iso(row.finished_at),
        )
