"""The agent's side of policy versions (edge_agent/policy_updates.py), without NATS: chunks taken
in order and resumed, sizes and checksums enforced, a model that does not load refused, two
versions kept on disk, and a restart that finds its kept version broken falls back."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from edgeplane_contract.credentials import new_user_seed, public_key_of
from edgeplane_contract.messages import PolicyV1
from edgeplane_contract.policy.bundle import metadata_bytes
from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH, METADATA_NAME
from edgeplane_contract.policy.signing import sign_policy, signed_text

from edge_agent.policy_updates import PolicyUpdates, load_current

SEED = new_user_seed()
MODEL = DEFAULT_MODEL_PATH.read_bytes()
_META = json.loads((DEFAULT_MODEL_PATH.parent / METADATA_NAME).read_text())
META = metadata_bytes({**_META, "files": {"model.onnx": {"sha256": hashlib.sha256(MODEL).hexdigest()}}})


def offer(version: int, model: bytes = MODEL, meta: bytes = META, seed: str = SEED) -> PolicyV1:
    sums = hashlib.sha256(model).hexdigest(), hashlib.sha256(meta).hexdigest()
    text = signed_text(version, sums[0], len(model), sums[1], len(meta))
    return PolicyV1(
        version=version,
        model_sha256=sums[0],
        model_size=len(model),
        metadata_sha256=sums[1],
        metadata_size=len(meta),
        signature=sign_policy(seed, text),
    )


def chunk(base: PolicyV1, part: str, offset: int, data: bytes) -> PolicyV1:
    return dataclasses.replace(base, part=part, offset=offset, data=base64.b64encode(data).decode())


def updates(tmp_path: Path, installed: list[Any]) -> PolicyUpdates:
    return PolicyUpdates(
        policy_dir=tmp_path / "policy",
        hub_public_key=public_key_of(SEED),
        shipped=None,
        enabled=True,
        install=lambda policy, version: installed.append((version, policy.source)),
    )


async def transfer(u: PolicyUpdates, o: PolicyV1, files: dict[str, bytes], step: int = 20_000) -> Any:
    ack = await u.handle(o)
    for _ in range(100):
        if ack.state != "need":
            return ack
        data = files[ack.part][ack.offset : ack.offset + step]
        ack = await u.handle(chunk(o, ack.part, ack.offset, data))
    raise AssertionError("the transfer never ended")


async def test_chunks_resume_where_they_stopped_and_the_version_is_kept(tmp_path: Path) -> None:
    installed: list[Any] = []
    u = updates(tmp_path, installed)
    o = offer(1)
    first = await u.handle(o)
    assert (first.state, first.part, first.offset) == ("need", "model", 0)
    ack = await u.handle(chunk(o, "model", 0, MODEL[:30_000]))
    assert (ack.part, ack.offset) == ("model", 30_000)
    # A chunk resent (its answer was lost) changes nothing: the answer says again what is needed.
    again = await u.handle(chunk(o, "model", 0, MODEL[:30_000]))
    assert (again.part, again.offset) == ("model", 30_000)
    done = await transfer(u, o, {"model": MODEL, "metadata": META})
    assert done.state == "running" and installed == [(1, "onnx-int8")]
    assert json.loads((tmp_path / "policy" / "current.json").read_text()) == {"version": 1}
    assert (await u.handle(o)).state == "running" and len(installed) == 1  # already running it

    # Two more versions: the one before the current stays on disk, older ones go.
    for version in (2, 3):
        assert (await transfer(u, offer(version), {"model": MODEL, "metadata": META})).state == "running"
    assert sorted(p.name for p in (tmp_path / "policy").glob("v*")) == ["v2", "v3"]
    policy, version = load_current(tmp_path / "policy", None)
    assert (version, policy.source) == (3, "onnx-int8")

    # The kept version broken on disk: a restart decides with the shipped model.
    (tmp_path / "policy" / "v3" / "model.onnx").write_bytes(b"garbage")
    policy, version = load_current(tmp_path / "policy", None)
    assert (version, policy.source) == (None, "onnx-int8")


async def test_what_does_not_match_the_signed_offer_is_refused(tmp_path: Path) -> None:
    installed: list[Any] = []
    u = updates(tmp_path, installed)
    forged = await u.handle(offer(1, seed=new_user_seed()))
    assert forged.state == "refused" and "not the hub's" in forged.reason
    o = offer(1)
    longer = await u.handle(chunk(o, "model", 0, MODEL + b"x"))
    assert longer.state == "refused" and "longer than its signed size" in longer.reason
    not_onnx = b"\x00" * 1000
    broken = await transfer(u, offer(2, model=not_onnx), {"model": not_onnx, "metadata": META})
    assert broken.state == "refused" and "does not load here" in broken.reason
    assert not (tmp_path / "policy" / "v2").exists() and installed == []
    too_big = offer(3)
    too_big.model_size = 9 * 2**20
    assert (await u.handle(too_big)).state == "refused"  # the size is checked before the signature
    keyless = PolicyUpdates(
        policy_dir=tmp_path / "other",
        hub_public_key="",
        shipped=None,
        enabled=True,
        install=lambda p, v: None,
    )
    assert "no hub key" in (await keyless.handle(o)).reason
