"""The policy versions in the store: upload (after :mod:`.check`), list, read, promote."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.orm import defer

from edgeplane_contract.policy.runtime import LocalPolicy

from controlplane.errors import ConflictError, NotFoundError, ValidationError
from controlplane.policies.check import Evaluation, checked_metadata, evaluate, open_model
from controlplane.policies.upload import PolicyUpload
from controlplane.store.models import PolicyAssignmentRow, PolicyRow
from controlplane.store.store import Store

__all__ = ["PolicyRegistry", "Registered"]

SHIPPED = "shipped"


@dataclass(frozen=True, slots=True)
class Registered:
    row: PolicyRow
    created: bool


class PolicyRegistry:
    """Versions of the agents' local policy, kept in the store (one upload at a time, so that two
    uploads of the same model cannot both become versions)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._uploading = asyncio.Lock()

    async def register(self, upload: PolicyUpload, *, created_by: str) -> Registered:
        """Check ``upload`` and keep it as the next version; the same model again returns the
        version it already is (``created`` False). Raises ValidationError (the field and why)
        for a model that fails a check."""
        metadata = checked_metadata(upload.model, upload.metadata)
        digest = metadata["files"]["model.onnx"]["sha256"]
        async with self._uploading:
            existing = await self._by_sha(digest)
            if existing is not None:
                if existing.state == "rolled_back":  # uploaded again: an operator wants it back
                    existing = await self._set_available(existing, created_by)
                return Registered(existing, created=False)
            evaluation = await asyncio.to_thread(
                self._evaluate, upload.model, metadata, await self.promoted()
            )
            if evaluation.agreement < upload.min_agreement:
                raise ValidationError(
                    f"picks the same action as {evaluation.reference} on {evaluation.agreement:.1%} of "
                    f"{evaluation.cases} held-out decisions; at least {upload.min_agreement:.1%} is asked "
                    "(min_agreement)",
                    field="model",
                )
            row = PolicyRow(
                sha256=digest,
                size=len(upload.model),
                model=upload.model,
                meta=metadata,
                description=upload.description,
                evaluation=evaluation.to_json(),
                created_at=time.time(),
                created_by=created_by,
                state="available",
            )
            async with self.store.session() as session:
                session.add(row)
                await session.flush()
                Store.add_event(
                    session,
                    "PolicyRegistered",
                    "policy",
                    str(row.version),
                    f"policy v{row.version} registered by {created_by} (agreement "
                    f"{evaluation.agreement:.1%} with {evaluation.reference})",
                    {"sha256": digest, "evaluation": evaluation.to_json()},
                )
                session.info["wrote"] = True
            return Registered(row, created=True)

    async def _set_available(self, row: PolicyRow, by: str) -> PolicyRow:
        async with self.store.session() as session:
            await session.execute(
                update(PolicyRow).where(PolicyRow.version == row.version).values(state="available")
            )
            Store.add_event(
                session,
                "PolicyRegistered",
                "policy",
                str(row.version),
                f"policy v{row.version} uploaded again by {by}: available again after its rollback",
            )
            session.info["wrote"] = True
        return await self.get(row.version)

    @staticmethod
    def _evaluate(model: bytes, metadata: dict[str, object], reference: PolicyRow | None) -> Evaluation:
        candidate = open_model(model, dict(metadata))
        if reference is None:
            return evaluate(candidate, LocalPolicy.load(), SHIPPED)
        return evaluate(candidate, open_model(reference.model, dict(reference.meta)), f"v{reference.version}")

    async def _by_sha(self, digest: str) -> PolicyRow | None:
        async with self.store.session() as session:
            found: PolicyRow | None = await session.scalar(
                select(PolicyRow).where(PolicyRow.sha256 == digest)
            )
            return found

    async def versions(self) -> list[PolicyRow]:
        """Every version, oldest first, without the models' bytes (what a list shows)."""
        async with self.store.session() as session:
            query = (
                select(PolicyRow).options(defer(PolicyRow.model, raiseload=True)).order_by(PolicyRow.version)
            )
            return list(await session.scalars(query))

    async def get(self, version: int) -> PolicyRow:
        async with self.store.session() as session:
            row = await session.get(PolicyRow, version)
        if row is None:
            raise NotFoundError(f"policy version {version} not found", field="version")
        return row

    async def promoted(self) -> PolicyRow | None:
        """The fleet's version (None: the model shipped with the agents)."""
        async with self.store.session() as session:
            found: PolicyRow | None = await session.scalar(
                select(PolicyRow).where(PolicyRow.state == "promoted")
            )
            return found

    # --- where versions run ----------------------------------------------------------------

    async def assignments(self) -> dict[str, int]:
        """Node -> version, for the nodes told to run a version other than the fleet's."""
        async with self.store.session() as session:
            rows = await session.execute(select(PolicyAssignmentRow.node, PolicyAssignmentRow.version))
            return {node: version for node, version in rows}

    async def desired(self) -> tuple[dict[str, int], int | None]:
        """(the assignments, the promoted version): what every node should run. Read every pass
        of the distributor: the version numbers only, not the models' bytes."""
        async with self.store.session() as session:
            promoted = await session.scalar(select(PolicyRow.version).where(PolicyRow.state == "promoted"))
        return await self.assignments(), promoted

    async def assign(self, version: int, nodes: list[str], *, by: str) -> list[str]:
        """Tell ``nodes`` to run ``version`` (a canary); the nodes whose assignment changed."""
        row = await self.get(version)
        if row.state == "rolled_back":
            raise ConflictError(
                f"policy v{version} was rolled back: upload it again to use it", field="version"
            )
        now = time.time()
        changed: list[str] = []
        async with self.store.session() as session:
            current = {
                a.node: a
                for a in await session.scalars(
                    select(PolicyAssignmentRow).where(PolicyAssignmentRow.node.in_(nodes))
                )
            }
            for node in nodes:
                existing = current.get(node)
                if existing is not None and existing.version == version:
                    continue
                if existing is None:
                    session.add(
                        PolicyAssignmentRow(node=node, version=version, assigned_at=now, assigned_by=by)
                    )
                else:
                    existing.version, existing.assigned_at, existing.assigned_by = version, now, by
                changed.append(node)
            if changed:
                Store.add_event(
                    session,
                    "PolicyRollout",
                    "policy",
                    str(version),
                    f"policy v{version} assigned to {len(changed)} node(s) by {by}",
                    {"nodes": changed},
                )
                session.info["wrote"] = True
        return changed

    async def promote(self, version: int, *, by: str) -> PolicyRow:
        """``version`` becomes the fleet's: every node without another assignment runs it, and
        its own canary assignments are no longer needed."""
        row = await self.get(version)
        if row.state == "rolled_back":
            raise ConflictError(
                f"policy v{version} was rolled back: upload it again to use it", field="version"
            )
        async with self.store.session() as session:
            await session.execute(
                update(PolicyRow).where(PolicyRow.state == "promoted").values(state="available")
            )
            await session.execute(
                update(PolicyRow).where(PolicyRow.version == version).values(state="promoted")
            )
            await session.execute(delete(PolicyAssignmentRow).where(PolicyAssignmentRow.version == version))
            Store.add_event(
                session, "PolicyPromoted", "policy", str(version), f"policy v{version} promoted by {by}"
            )
            session.info["wrote"] = True
        return await self.get(version)

    async def rollback(self, version: int, *, by: str, reason: str = "") -> PolicyRow:
        """Take ``version`` off every node: its canaries go back to the fleet's version, and if it
        was the fleet's, the fleet goes back to the shipped model."""
        await self.get(version)
        async with self.store.session() as session:
            await session.execute(
                update(PolicyRow).where(PolicyRow.version == version).values(state="rolled_back")
            )
            await session.execute(delete(PolicyAssignmentRow).where(PolicyAssignmentRow.version == version))
            Store.add_event(
                session,
                "PolicyRolledBack",
                "policy",
                str(version),
                f"policy v{version} rolled back by {by}" + (f": {reason}" if reason else ""),
                {"reason": reason},
            )
            session.info["wrote"] = True
        return await self.get(version)
