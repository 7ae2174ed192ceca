"""The event log, and the hub's health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from controlplane.api.views.base import DateTime, iso, one_of
from controlplane.store.models import EventRow

__all__ = ["Event", "EventPage", "Health"]


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    time: DateTime
    kind: str
    object_kind: str
    object_id: str
    message: str
    data: dict[str, Any]

    @classmethod
    def of(cls, row: EventRow) -> Event:
        return cls(
            id=row.id,
            time=iso(row.ts),
            kind=row.kind,
            object_kind=row.object_kind,
            object_id=row.object_id,
            message=row.message,
            data=row.data,
        )


@dataclass(frozen=True, slots=True)
class EventPage:
    items: list[Event]
    next_after: Annotated[int, {"description": "the last item's id (else the after asked): poll with it"}]
    limit: int


@dataclass(frozen=True, slots=True)
class Health:
    """``GET /healthz``: 200 when the database, NATS and the hub are all up, else 503."""

    status: Annotated[str, one_of(("ok", "degraded"))]
    database: bool
    nats: bool
    hub_id: str
    malformed_messages: dict[str, int]
    rejected_messages: dict[str, int]
