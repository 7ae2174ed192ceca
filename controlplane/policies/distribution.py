"""Brings every Ready node to the policy version it should run (its assignment, else the
promoted version, else the shipped model), over NATS: a signed offer, then the chunks the agent
asks for (edge_agent/policy_updates.py; protocol in docs/protocol.md).

A node's version is what its heartbeats say (``NodeLive.policy_version``), so a node that
restarts, or missed a push while cut off, is brought back on a later pass. A refusal (a model
that does not load there, a bad signature) is an event and holds that node and version for
:data:`REFUSED_HOLD_S`; a node that does not answer is tried again after :data:`UNANSWERED_HOLD_S`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from edgeplane_contract.messages import MessageError, PolicyAckV1, PolicyV1, decode, encode
from edgeplane_contract.policy.bundle import metadata_bytes
from edgeplane_contract.policy.signing import sign_policy, signed_text

from controlplane.bus.hub_bus import HubBus
from controlplane.fleet.nodes import NodeLive
from controlplane.hub.periodic import run_periodically
from controlplane.policies.registry import PolicyRegistry
from controlplane.store.store import Store

__all__ = ["PolicyDistributor"]

log = logging.getLogger("edgeplane.hub.policy")

CHUNK_BYTES = 48 * 1024  # 64 KiB as base64: well under any NATS server's max_payload
REQUEST_TIMEOUT_S = 5.0
REFUSED_HOLD_S = 300.0
UNANSWERED_HOLD_S = 10.0
CONCURRENCY = 8


class _Files:
    """A version's two files, its signed offer, and the chunk messages cut from it."""

    def __init__(self, version: int, model: bytes, metadata: bytes, seed: str) -> None:
        self.files = {"model": model, "metadata": metadata}
        sums = {part: hashlib.sha256(data).hexdigest() for part, data in self.files.items()}
        text = signed_text(version, sums["model"], len(model), sums["metadata"], len(metadata))
        self.offer = PolicyV1(
            version=version,
            model_sha256=sums["model"],
            model_size=len(model),
            metadata_sha256=sums["metadata"],
            metadata_size=len(metadata),
            signature=sign_policy(seed, text),
        )

    def chunk(self, part: str, offset: int) -> PolicyV1 | None:
        data = self.files.get(part)
        if data is None or not 0 <= offset < len(data):
            return None
        piece = base64.b64encode(data[offset : offset + CHUNK_BYTES]).decode()
        return replace(self.offer, part=part, offset=offset, data=piece)


class PolicyHub(Protocol):
    """What the distributor reads of the hub (when it runs, not when it is made)."""

    @property
    def bus(self) -> HubBus: ...

    @property
    def nodes(self) -> Mapping[str, NodeLive]: ...


class PolicyDistributor:
    """One pass per ``every_s`` (or at once after :meth:`wake`) over the hub's live nodes."""

    def __init__(
        self,
        *,
        registry: PolicyRegistry,
        hub: PolicyHub,
        every_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.hub = hub
        self.every_s = every_s
        self.clock = clock
        self.outcomes: Counter[str] = Counter()
        self._files: dict[int, _Files] = {}
        self._held: dict[str, tuple[int | None, float]] = {}
        self._wake = asyncio.Event()
        self._said_unsigned = False

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        await run_periodically(
            self.pass_once, every_s=self.every_s, what="policy distribution", log=log, wake=self._wake
        )

    async def pass_once(self) -> Counter[str]:
        """Push to every Ready node whose version is not the one it should run; the outcomes."""
        if not self.hub.nodes:
            return Counter()
        assignments, promoted = await self.registry.desired()
        now = self.clock()
        todo: list[tuple[NodeLive, int | None]] = []
        for live in list(self.hub.nodes.values()):
            want = assignments.get(live.name, promoted)
            if live.status != "Ready" or live.policy_version == want:
                continue
            held = self._held.get(live.name)
            if held is not None and held[0] == want and held[1] > now:
                continue
            todo.append((live, want))
        if not todo:
            return Counter()
        slots = asyncio.Semaphore(CONCURRENCY)

        async def one(live: NodeLive, version: int | None) -> str:
            async with slots:
                return await self.push(live, version)

        done = Counter(await asyncio.gather(*(one(live, v) for live, v in todo)))
        self.outcomes.update(done)
        return done

    async def _files_of(self, version: int) -> _Files | None:
        files = self._files.get(version)
        if files is None:
            seed = self.hub.bus.signing_seed
            if seed is None:
                if not self._said_unsigned:
                    self._said_unsigned = True
                    log.error(
                        "policy versions cannot be sent: this hub has no NATS key to sign them with "
                        "(run it with --nats-seed, as enrolment does)"
                    )
                return None
            row = await self.registry.get(version)
            files = self._files[version] = _Files(version, row.model, metadata_bytes(row.meta), seed)
        return files

    async def push(self, live: NodeLive, version: int | None) -> str:
        """Offer ``version`` to one node and send what it asks for until it runs it; the outcome:
        installed, refused, unanswered or unsigned."""
        now = self.clock()
        if version is None:
            message, files = PolicyV1(version=None), None
        else:
            files = await self._files_of(version)
            if files is None:
                self._held[live.name] = (version, now + REFUSED_HOLD_S)
                return "unsigned"
            message = files.offer
        subject = self.hub.bus.subjects(live.cluster).policy(live.name)
        # Each answer asks for one more chunk: bounded by the chunks of both files, plus the offer.
        budget = 2 + (sum(len(f) for f in files.files.values()) // CHUNK_BYTES + 2 if files else 0)
        for _ in range(budget):
            try:
                raw = await self.hub.bus.request(
                    live.cluster, subject, encode(message), deadline_s=REQUEST_TIMEOUT_S
                )
                ack = decode(raw, PolicyAckV1)
            except MessageError as exc:
                self.hub.bus.reject("policy_ack", live.name, str(exc))
                break
            except Exception as exc:  # no responders, timeout, no connection: a later pass
                log.debug("policy v%s to %s: %s", version, live.name, exc)
                break
            if ack.state == "running" and ack.version == version:
                live.policy_version = version  # until its next heartbeat says so itself
                self._held.pop(live.name, None)
                await self._event(
                    "PolicyInstalled", live, version, f"node {live.name} runs policy {_name(version)}"
                )
                return "installed"
            if ack.state == "refused":
                self._held[live.name] = (version, self.clock() + REFUSED_HOLD_S)
                await self._event(
                    "PolicyRefused",
                    live,
                    version,
                    f"node {live.name} refused policy {_name(version)}: {ack.reason}",
                    {"reason": ack.reason[:500]},
                )
                return "refused"
            chunk = files.chunk(ack.part, ack.offset) if ack.state == "need" and files is not None else None
            if chunk is None:
                self.hub.bus.reject(
                    "policy_ack", live.name, f"asked for {ack.part!r}@{ack.offset} of {_name(version)}"
                )
                break
            message = chunk
        self._held[live.name] = (version, self.clock() + UNANSWERED_HOLD_S)
        return "unanswered"

    async def _event(
        self,
        kind: str,
        live: NodeLive,
        version: int | None,
        message: str,
        data: dict[str, object] | None = None,
    ) -> None:
        try:
            async with self.registry.store.session() as session:
                Store.add_event(
                    session, kind, "node", live.name, message, {"version": version, **(data or {})}
                )
                session.info["wrote"] = True
        except Exception as exc:  # the push happened; only its record is missing
            log.warning("event %s for %s not recorded: %s", kind, live.name, exc)


def _name(version: int | None) -> str:
    return f"v{version}" if version is not None else "shipped"
