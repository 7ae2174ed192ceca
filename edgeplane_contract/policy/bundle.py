"""How a policy version is laid out on disk (hub checks and agents keep the same layout):
``<dir>/model.onnx`` and ``<dir>/metadata.json``, whose ``files`` entry records the model's
checksum, so that :meth:`LocalPolicy.load_strict` checks the pair."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from edgeplane_contract.policy.runtime import METADATA_NAME

__all__ = ["MODEL_NAME", "metadata_bytes", "write_version"]

MODEL_NAME = "model.onnx"


def metadata_bytes(metadata: dict[str, Any]) -> bytes:
    """The metadata as the hub sends and signs it (sorted keys: one text per metadata)."""
    return json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode()


def write_version(directory: Path, model: bytes, metadata: bytes) -> Path:
    """Write both files (each through a temporary name, so a crash leaves no half file under
    its real name); the model's path."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in ((MODEL_NAME, model), (METADATA_NAME, metadata)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)
    return directory / MODEL_NAME
