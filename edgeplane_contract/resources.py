"""Resource quantities: parsing of CPU and memory strings, and the request a workload makes.

CPU is a float number of cores ("500m" = 0.5). Memory is an int number of bytes; strings use
Kubernetes suffixes (Ki, Mi, Gi, Ti, and the decimal k, M, G, T). Ephemeral storage (the bytes a
unit may write to its work dir) is a memory-like quantity: both the request the scheduler counts
and the limit the agent enforces, :data:`DEFAULT_EPHEMERAL_STORAGE` when a spec names none.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from edgeplane_contract.errors import ValidationError

__all__ = [
    "DEFAULT_EPHEMERAL_STORAGE",
    "MIG_PROFILES",
    "NODE_TYPES",
    "ResourceRequest",
    "format_memory",
    "parse_cpu",
    "parse_memory",
]

_MEMORY_SUFFIX = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_MEMORY_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|[kKMGT])?\s*$")

# What a workload's replica or a function's instance may write to its work dir when its spec does
# not say (Kubernetes' ephemeral-storage, request and limit in one): stated once, here. Without a
# default one unit could fill the node's disk.
DEFAULT_EPHEMERAL_STORAGE = 2**30

# The kinds of node, in the order the scheduler's node table and the power model index them.
NODE_TYPES = ("cpu", "gpu", "dpu", "edge")

# NVIDIA A100-40GB MIG profiles: name -> (compute slices, memory GB).
MIG_PROFILES: dict[str, tuple[int, int]] = {
    "1g.5gb": (1, 5),
    "2g.10gb": (2, 10),
    "3g.20gb": (3, 20),
    "4g.20gb": (4, 20),
    "7g.40gb": (7, 40),
}


def parse_cpu(value: object, *, field_name: str = "cpu") -> float:
    """Parse a CPU quantity (cores as a number, or "250m")."""
    if isinstance(value, bool):
        raise ValidationError("must be a number of cores or a string like '500m'", field=field_name)
    if isinstance(value, int | float):
        cores = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            cores = float(text[:-1]) / 1000.0 if text.endswith("m") else float(text)
        except ValueError:
            raise ValidationError(f"cannot parse CPU quantity {value!r}", field=field_name) from None
    else:
        raise ValidationError("must be a number of cores or a string like '500m'", field=field_name)
    if not cores > 0 or cores != cores or cores > 1e6:
        raise ValidationError("must be a positive number of cores", field=field_name)
    return cores


def parse_memory(value: object, *, field_name: str = "memory") -> int:
    """Parse a memory quantity into bytes (int bytes, or "64Mi", "1G", ...)."""
    if isinstance(value, bool):
        raise ValidationError("must be bytes or a string like '64Mi'", field=field_name)
    try:
        if isinstance(value, int):
            amount = value
        elif isinstance(value, float):
            amount = int(value)
        elif isinstance(value, str):
            match = _MEMORY_RE.match(value)
            if not match:
                raise ValidationError(f"cannot parse memory quantity {value!r}", field=field_name)
            amount = int(float(match.group(1)) * _MEMORY_SUFFIX[match.group(2) or ""])
        else:
            raise ValidationError("must be bytes or a string like '64Mi'", field=field_name)
    except (OverflowError, ValueError):  # NaN, or digits beyond a float ("9" * 400): not a quantity
        raise ValidationError("must be a positive amount of memory", field=field_name) from None
    if amount <= 0 or amount > 2**60:
        raise ValidationError("must be a positive amount of memory", field=field_name)
    return amount


def format_memory(num_bytes: int) -> str:
    """Render bytes with the largest binary suffix that divides them exactly."""
    for suffix in ("Ti", "Gi", "Mi", "Ki"):
        unit = _MEMORY_SUFFIX[suffix]
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


@dataclass(slots=True)
class ResourceRequest:
    """What one replica of a workload asks for."""

    cpu: float = 0.1
    memory: int = 64 * 2**20
    gpu: int = 0
    mig: list[str] = field(default_factory=list)
    dpu: int = 0
    ephemeral_storage: int = DEFAULT_EPHEMERAL_STORAGE

    @classmethod
    def parse(cls, body: object, *, prefix: str = "resources") -> ResourceRequest:
        if body is None:
            return cls()
        if not isinstance(body, dict):
            raise ValidationError("must be an object", field=prefix)
        unknown = set(body) - {"cpu", "memory", "gpu", "mig", "dpu", "ephemeral_storage"}
        if unknown:
            raise ValidationError(
                f"unknown key {sorted(unknown)[0]!r}", field=f"{prefix}.{sorted(unknown)[0]}"
            )
        req = cls()
        if "cpu" in body:
            req.cpu = parse_cpu(body["cpu"], field_name=f"{prefix}.cpu")
        if "memory" in body:
            req.memory = parse_memory(body["memory"], field_name=f"{prefix}.memory")
        if "ephemeral_storage" in body:
            req.ephemeral_storage = parse_memory(
                body["ephemeral_storage"], field_name=f"{prefix}.ephemeral_storage"
            )
        for key in ("gpu", "dpu"):
            if key in body:
                value = body[key]
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 64:
                    raise ValidationError("must be an integer between 0 and 64", field=f"{prefix}.{key}")
                setattr(req, key, value)
        if "mig" in body:
            mig = body["mig"]
            if isinstance(mig, str):
                mig = [mig]
            if not isinstance(mig, list) or not all(isinstance(p, str) for p in mig):
                raise ValidationError("must be a MIG profile name or a list of them", field=f"{prefix}.mig")
            for profile in mig:
                if profile not in MIG_PROFILES:
                    raise ValidationError(
                        f"unknown MIG profile {profile!r}; known: {', '.join(MIG_PROFILES)}",
                        field=f"{prefix}.mig",
                    )
            if mig and req.gpu:
                raise ValidationError("ask for whole GPUs or MIG slices, not both", field=f"{prefix}.mig")
            req.mig = list(mig)
        return req

    def to_dict(self) -> dict[str, object]:
        return asdict(self)
