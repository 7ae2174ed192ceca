"""What an uploaded model must pass before the hub keeps it, and how it compares with the
version in force.

1. It loads in this runtime exactly as an agent loads it (:meth:`LocalPolicy.load_strict`): its
   ``metadata.json`` names this feature schema, feature count, interference prior and action
   space, and onnxruntime opens it with the input and outputs the runtime binds.
2. Where the metadata lists files with checksums, one of them is this model.
3. On held-out decisions (seeds :data:`GATE_SEED_BASE`..., drawn by the trainer's environment but
   used by neither training nor ``policy eval``) it picks the same action as the reference (the
   promoted version, else the shipped model) on at least ``min_agreement`` of them. Both
   policies' mean reward on those decisions is recorded beside it (in the reward's own units,
   exact terms, decline = 0): the numbers a canary then has to confirm live.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeplane_contract.policy.bundle import MODEL_NAME, metadata_bytes, write_version
from edgeplane_contract.policy.errors import ModelLoadError
from edgeplane_contract.policy.runtime import LocalPolicy

from controlplane.errors import ValidationError
from controlplane.policy.env import EVAL_SEED_BASE
from controlplane.policy.samples import Samples, generate

__all__ = ["GATE_SEED_BASE", "MODEL_NAME", "Evaluation", "checked_metadata", "evaluate", "open_model"]

GATE_SEED_BASE = EVAL_SEED_BASE + 900
GATE_SEEDS = 2
GATE_STATES_PER_SEED = 256


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The held-out comparison: ``agreement`` (share of equal actions), mean rewards, cases."""

    agreement: float
    mean_reward: float
    reference_mean_reward: float
    reference: str
    cases: int
    seeds: list[int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def checked_metadata(model: bytes, metadata: dict[str, Any]) -> dict[str, Any]:
    """The metadata as stored: its ``files`` replaced by this model's name, size and checksum.
    A metadata that lists files with checksums, none of them this model's, is refused (a model
    uploaded with another model's metadata)."""
    digest = hashlib.sha256(model).hexdigest()
    files = metadata.get("files")
    if isinstance(files, dict) and files:
        sums = [e.get("sha256") for e in files.values() if isinstance(e, dict) and e.get("sha256")]
        if sums and digest not in sums:
            raise ValidationError(
                "no file listed in metadata.files has this model's sha256: the metadata is another model's",
                field="metadata.files",
            )
    out = dict(metadata)
    out["files"] = {MODEL_NAME: {"sha256": digest, "bytes": len(model)}}
    return out


def open_model(model: bytes, metadata: dict[str, Any]) -> LocalPolicy:
    """The model as an agent would run it, or ValidationError naming why it cannot run."""
    with tempfile.TemporaryDirectory(prefix="edgeplane-policy-") as tmp:
        try:
            policy = LocalPolicy.load_strict(write_version(Path(tmp), model, metadata_bytes(metadata)))
        except ModelLoadError as exc:
            field = "metadata" if "incompatible" in exc.reason or "metadata" in exc.reason else "model"
            raise ValidationError(exc.reason, field=field) from None
        # The session holds the model in memory; the files can go.
        return policy


def _actions(policy: LocalPolicy, samples: Samples) -> np.ndarray:
    _, logits = policy.outputs(samples.x)
    return np.asarray(np.where(samples.mask, logits, -np.inf).argmax(axis=1), dtype=np.int64)


def evaluate(candidate: LocalPolicy, reference: LocalPolicy, reference_name: str) -> Evaluation:
    """Both policies on the gate's held-out decisions (a second or so of CPU: run it off the loop)."""
    seeds = [GATE_SEED_BASE + i for i in range(GATE_SEEDS)]
    samples = generate(seeds, GATE_STATES_PER_SEED)
    rewards = samples.rewards()
    rows = np.arange(len(samples))
    mine, theirs = _actions(candidate, samples), _actions(reference, samples)
    return Evaluation(
        agreement=round(float(np.mean(mine == theirs)), 4),
        mean_reward=round(float(rewards[rows, mine].mean()), 4),
        reference_mean_reward=round(float(rewards[rows, theirs].mean()), 4),
        reference=reference_name,
        cases=len(samples),
        seeds=seeds,
    )
