"""The functions' versions: kept in the store, mirrored in memory for the invocation path.

Versions are immutable; registering the same content again is a no-op, new content without a
version gets the next number and becomes the one invocations use. Version numbers are never
reused for other content, even after a DELETE.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from edgeplane_contract.transport import PAYLOAD_MARGIN

from controlplane.errors import ConflictError, NotFoundError
from controlplane.fleet.nodes import FunctionHost
from controlplane.serverless.spec import FunctionSpec
from controlplane.store.models import FunctionRow
from controlplane.store.store import Store

__all__ = ["FunctionRegistry"]


class FunctionRegistry:
    """Registration, lookup and deletion of function versions for one hub."""

    def __init__(self, hub: FunctionHost) -> None:
        self.hub = hub
        self.specs: dict[str, dict[int, FunctionSpec]] = {}  # name -> version -> spec
        self.loaded = False  # specs hold the store's functions (before: none is known to be gone)
        # Registrations and deletions of one hub in turn: a version number is read, then written.
        self._lock = asyncio.Lock()

    async def load(self, s: AsyncSession) -> None:
        """Read the versions that are not deleted from the store (at the hub's start)."""
        for row in await s.scalars(select(FunctionRow).where(FunctionRow.deleted.is_(False))):
            self.specs.setdefault(row.name, {})[row.version] = FunctionSpec.from_stored(row.spec)
        self.loaded = True

    async def register(self, spec: FunctionSpec) -> tuple[FunctionSpec, bool]:
        """Store a version; returns (the stored spec, created). Same content again is not a new version.

        Version numbers are never reused: after a DELETE, numbering continues after the highest
        version ever stored, and a deleted version registered again with the same content returns.
        """
        spec.check_fits(self.hub.bus.max_payload - PAYLOAD_MARGIN)
        async with self._lock:
            versions = self.specs.get(spec.name, {})
            if spec.version is not None and spec.version in versions:
                existing = versions[spec.version]
                if existing.content() != spec.content():
                    raise ConflictError(
                        f"version {spec.version} of {spec.name!r} exists with other content", field="version"
                    )
                return existing, False
            if spec.version is None and versions:
                latest = versions[max(versions)]
                if latest.content() == spec.content():
                    return latest, False
            async with self.hub.store.session() as s:
                rows = {
                    row.version: row
                    for row in await s.scalars(select(FunctionRow).where(FunctionRow.name == spec.name))
                }
                if spec.version is None:
                    spec.version = max(rows, default=0) + 1
                deleted = rows.get(spec.version)
                if deleted is None:
                    s.add(
                        FunctionRow(
                            name=spec.name, version=spec.version, spec=spec.to_dict(), created_at=time.time()
                        )
                    )
                elif FunctionSpec.from_stored(deleted.spec).content() == spec.content():
                    deleted.deleted = False
                else:
                    raise ConflictError(
                        f"version {spec.version} of {spec.name!r} was deleted; its number is not reused "
                        "for other content (omit version to get the next one)",
                        field="version",
                    )
                Store.add_event(s, "FunctionVersionCreated", "function", spec.name, f"version {spec.version}")
            self.specs.setdefault(spec.name, {})[spec.version] = spec
        return spec, True

    def resolve(self, name: str, version: int | None = None) -> FunctionSpec:
        """``version`` of ``name`` (None: the latest); raises :class:`NotFoundError` when unknown."""
        versions = self.specs.get(name)
        if not versions:
            raise NotFoundError(f"function {name!r} not found", field="name")
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            raise NotFoundError(f"function {name!r} has no version {version}", field="version")
        return versions[version]

    async def delete(self, name: str) -> None:
        """Mark every version of ``name`` deleted; raises :class:`NotFoundError` for an unknown one."""
        async with self._lock:
            self.resolve(name)
            async with self.hub.store.session() as s:
                for row in await s.scalars(select(FunctionRow).where(FunctionRow.name == name)):
                    row.deleted = True
                Store.add_event(s, "FunctionDeleted", "function", name)
            self.specs.pop(name, None)
