"""The Kubernetes-style probes: liveness (``/livez``) apart from readiness (``/readyz``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from controlplane.api.views.base import one_of

__all__ = ["Liveness", "Readiness"]


@dataclass(frozen=True, slots=True)
class Liveness:
    """``GET /livez``: 200 whenever the process's event loop answers; it calls no store or bus, so
    an outage of NATS or the database never makes a liveness probe restart the hub."""

    status: Annotated[str, one_of(("ok",))]


@dataclass(frozen=True, slots=True)
class Readiness:
    """``GET /readyz``: 200 when the database reads and writes, NATS is connected and the hub has
    started, else 503 with the parts that are down in ``down``."""

    status: Annotated[str, one_of(("ok", "unavailable"))]
    database: bool
    nats: bool
    hub: bool
    down: Annotated[list[str], {"description": "the parts that are down: database, nats, hub"}]
