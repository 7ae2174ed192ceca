"""The policy versions in the store: upload (after :mod:`.check`), list, read, promote."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy import select

from edgeplane_contract.policy.runtime import LocalPolicy

from controlplane.errors import NotFoundError, ValidationError
from controlplane.policies.check import Evaluation, checked_metadata, evaluate, open_model
from controlplane.policies.upload import PolicyUpload
from controlplane.store.models import PolicyRow
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

    async def list(self) -> list[PolicyRow]:
        async with self.store.session() as session:
            return list(await session.scalars(select(PolicyRow).order_by(PolicyRow.version)))

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
