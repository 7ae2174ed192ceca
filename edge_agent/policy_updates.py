"""Policy versions the hub sends (``node.<n>.policy``, :class:`PolicyV1`): checked, fetched in
chunks, loaded, kept, and swapped in; the previous version stays on disk to go back to.

The hub offers a version with the checksums and sizes of its two files, signed by its key; the
agent answers what it needs next (``need`` part@offset), the hub sends that chunk, and so on,
so that a transfer cut off resumes where it stopped. Nothing is taken that the hub's signature
does not cover: a site's leaf server or anyone else on the node's subjects cannot feed it a
model. A complete version is written under ``<work_dir>/policy/v<N>/``, loaded exactly as the
shipped model is (:meth:`LocalPolicy.load_strict`), and only then used; ``current.json`` says
which version a restarted agent decides with.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from edgeplane_contract.messages import MessageError, PolicyAckV1, PolicyV1, decode, encode
from edgeplane_contract.policy.bundle import MODEL_NAME, write_version
from edgeplane_contract.policy.errors import ModelLoadError
from edgeplane_contract.policy.runtime import LocalPolicy
from edgeplane_contract.policy.signing import SignatureError, signed_text, verify_policy

__all__ = ["MAX_FILE_BYTES", "PolicyUpdates", "load_current"]

log = logging.getLogger("edgeplane.agent.policy")

MAX_FILE_BYTES = 8 * 2**20  # a model or metadata larger than this is refused before any chunk
CURRENT = "current.json"


def load_current(policy_dir: Path, shipped: str | None) -> tuple[LocalPolicy, int | None]:
    """The policy a (re)starting agent decides with: the version ``current.json`` names when it
    still loads, else the shipped model (logged)."""
    try:
        version = json.loads((policy_dir / CURRENT).read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        version = None
    if isinstance(version, int) and not isinstance(version, bool):
        try:
            return LocalPolicy.load_strict(policy_dir / f"v{version}" / MODEL_NAME), version
        except ModelLoadError as exc:
            log.warning("policy v%d kept on disk does not load (%s): the shipped model decides", version, exc)
    return LocalPolicy.load(shipped), None


class _Transfer:
    """The files of one offered version, as far as they have come."""

    def __init__(self, offer: PolicyV1) -> None:
        self.key = (offer.version, offer.model_sha256, offer.metadata_sha256)
        self.sizes = {"model": offer.model_size, "metadata": offer.metadata_size}
        self.sums = {"model": offer.model_sha256, "metadata": offer.metadata_sha256}
        self.parts: dict[str, bytearray] = {"model": bytearray(), "metadata": bytearray()}

    def need(self) -> tuple[str, int] | None:
        for part in ("model", "metadata"):
            if len(self.parts[part]) < self.sizes[part]:
                return part, len(self.parts[part])
        return None


class PolicyUpdates:
    """The agent's side of policy versions. ``install(policy, version)`` swaps the policy the
    decider uses."""

    def __init__(
        self,
        *,
        policy_dir: Path,
        hub_public_key: str,
        shipped: str | None,
        enabled: bool,
        install: Callable[[LocalPolicy, int | None], None],
        version: int | None = None,
    ) -> None:
        self.policy_dir = policy_dir
        self.hub_public_key = hub_public_key
        self.shipped = shipped
        self.enabled = enabled
        self._install = install
        self.version = version
        self._transfer: _Transfer | None = None
        self._refused: tuple[Any, ...] | None = None
        self._lock = asyncio.Lock()
        self.counters = {"installed": 0, "refused": 0, "malformed": 0}

    async def on_policy(self, msg: Msg) -> None:
        try:
            offer = decode(msg.data, PolicyV1)
        except MessageError as exc:
            self.counters["malformed"] += 1
            log.warning("dropped malformed policy message: %s", exc)
            return
        async with self._lock:  # one message at a time: chunks arrive in order of the answers
            ack = await self.handle(offer)
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(encode(ack))

    async def handle(self, offer: PolicyV1) -> PolicyAckV1:
        if not self.enabled:
            return self._refuse(offer, "the local policy is off on this node (local_policy: false)")
        if offer.version is None:
            if self.version is not None:
                policy = await asyncio.to_thread(LocalPolicy.load, self.shipped)
                self._switch(policy, None)
            return PolicyAckV1(version=None, state="running")
        if offer.version == self.version:
            return PolicyAckV1(version=offer.version, state="running")
        reason = self._check_offer(offer.version, offer)
        if reason:
            return self._refuse(offer, reason)
        transfer = self._transfer
        if transfer is None or transfer.key != (offer.version, offer.model_sha256, offer.metadata_sha256):
            transfer = self._transfer = _Transfer(offer)
        if offer.part:
            reason = self._take_chunk(transfer, offer)
            if reason:
                self._transfer = None
                return self._refuse(offer, reason)
        need = transfer.need()
        if need is not None:
            return PolicyAckV1(version=offer.version, state="need", part=need[0], offset=need[1])
        self._transfer = None
        for part in ("model", "metadata"):
            if hashlib.sha256(transfer.parts[part]).hexdigest() != transfer.sums[part]:
                return self._refuse(offer, f"the {part} received does not match its signed checksum")
        directory = self.policy_dir / f"v{offer.version}"
        try:
            policy = await asyncio.to_thread(self._write_and_load, directory, transfer)
        except ModelLoadError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            return self._refuse(offer, f"the model does not load here: {exc.reason}")
        except OSError as exc:
            return self._refuse(offer, f"cannot keep the model: {exc.strerror or exc}")
        previous = self.version
        self._switch(policy, offer.version)
        self._prune(keep={offer.version, previous})
        return PolicyAckV1(version=offer.version, state="running")

    def _check_offer(self, version: int, offer: PolicyV1) -> str:
        if not self.hub_public_key:
            return "no hub key to check policy versions with (enrol again, or set hub_public_key)"
        if isinstance(version, bool) or version < 1:
            return "a policy version is a positive integer"
        for part, size in (("model", offer.model_size), ("metadata", offer.metadata_size)):
            if not 0 < size <= MAX_FILE_BYTES:
                return f"the {part} size {size} is not in (0, {MAX_FILE_BYTES}]"
        text = signed_text(
            version, offer.model_sha256, offer.model_size, offer.metadata_sha256, offer.metadata_size
        )
        try:
            verify_policy(self.hub_public_key, text, offer.signature)
        except SignatureError as exc:
            return str(exc)
        return ""

    @staticmethod
    def _take_chunk(transfer: _Transfer, offer: PolicyV1) -> str:
        if offer.part not in transfer.parts:
            return f"unknown part {offer.part!r}"
        buffer = transfer.parts[offer.part]
        if offer.offset != len(buffer):
            return ""  # a resent or late chunk: the answer says again what is needed
        try:
            data = base64.b64decode(offer.data, validate=True)
        except (binascii.Error, ValueError):
            return f"the {offer.part} chunk is not base64"
        if len(buffer) + len(data) > transfer.sizes[offer.part]:
            return f"the {offer.part} is longer than its signed size"
        buffer.extend(data)
        return ""

    def _write_and_load(self, directory: Path, transfer: _Transfer) -> LocalPolicy:
        write_version(directory, bytes(transfer.parts["model"]), bytes(transfer.parts["metadata"]))
        return LocalPolicy.load_strict(directory / MODEL_NAME)

    def _switch(self, policy: LocalPolicy, version: int | None) -> None:
        self._install(policy, version)
        self.version = version
        self.counters["installed"] += 1
        try:
            self.policy_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.policy_dir / f".{CURRENT}.tmp"
            tmp.write_text(json.dumps({"version": version}))
            tmp.replace(self.policy_dir / CURRENT)
        except OSError as exc:  # it decides with it now; a restart goes back to the previous one
            log.warning("policy version %s in use but not recorded: %s", version, exc)
        log.info("local policy is now %s", f"v{version}" if version is not None else "the shipped model")

    def _prune(self, keep: set[int | None]) -> None:
        """Every version directory but the one in use and the one before it."""
        for path in self.policy_dir.glob("v*"):
            name = path.name[1:]
            if path.is_dir() and name.isdigit() and int(name) not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def _refuse(self, offer: PolicyV1, reason: str) -> PolicyAckV1:
        key = (offer.version, offer.model_sha256, reason)
        self.counters["refused"] += 1
        if key != self._refused:  # said once per version and reason, not per chunk or retry
            self._refused = key
            log.warning("policy version %s refused: %s", offer.version, reason)
        return PolicyAckV1(version=offer.version, state="refused", reason=reason)
