"""Workload specs parsed once and kept: a workload's spec never changes after it is created, so the
hub parses (and, with env encryption, opens) the stored JSON once per workload instead of at every
placement attempt, run command and reconcile round."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.specs.workload import WorkloadSpec
from controlplane.store.models import WorkloadRow

__all__ = ["SpecCache"]

# Enough for every workload a busy hub has pending or running at once; older ones are parsed again.
DEFAULT_KEPT = 20_000


class SpecCache:
    """Workload id -> parsed :class:`WorkloadSpec`, least recently used dropped beyond ``kept``.

    Callers must not mutate a spec they get (copy with ``dataclasses.replace``)."""

    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self._specs: OrderedDict[str, WorkloadSpec] = OrderedDict()
        self._kept = kept

    def __len__(self) -> int:
        return len(self._specs)

    def put(self, workload_id: str, spec: WorkloadSpec) -> None:
        self._specs[workload_id] = spec
        self._specs.move_to_end(workload_id)
        while len(self._specs) > self._kept:
            self._specs.popitem(last=False)

    def get(self, workload_id: str) -> WorkloadSpec | None:
        spec = self._specs.get(workload_id)
        if spec is not None:
            self._specs.move_to_end(workload_id)
        return spec

    def drop(self, workload_id: str) -> None:
        self._specs.pop(workload_id, None)

    def of_row(self, workload_id: str, stored: Mapping[str, Any]) -> WorkloadSpec:
        """The spec of a workload whose stored form the caller has already loaded."""
        spec = self.get(workload_id)
        if spec is None:
            spec = WorkloadSpec.from_stored(dict(stored))
            self.put(workload_id, spec)
        return spec

    async def load(self, s: AsyncSession, workload_ids: Iterable[str]) -> dict[str, WorkloadSpec]:
        """The specs of ``workload_ids`` (those that exist), reading only the missing ones from the
        store, in one query."""
        found: dict[str, WorkloadSpec] = {}
        missing: list[str] = []
        for workload_id in dict.fromkeys(workload_ids):
            spec = self.get(workload_id)
            if spec is None:
                missing.append(workload_id)
            else:
                found[workload_id] = spec
        if missing:
            rows = await s.execute(
                select(WorkloadRow.id, WorkloadRow.spec).where(WorkloadRow.id.in_(missing))
            )
            for workload_id, stored in rows:
                found[workload_id] = self.of_row(workload_id, stored)
        return found
