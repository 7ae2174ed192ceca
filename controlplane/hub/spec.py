"""The workload spec users POST: parsing, validation (errors name the field) and storage form."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from edgeplane_contract.messages import RESTART_POLICIES, CommandV1, OfferSpec, RunSpec, encode
from edgeplane_contract.resources import ResourceRequest

from controlplane.errors import PayloadTooLargeError, ValidationError

__all__ = [
    "RESTART_POLICIES",
    "Affinity",
    "WorkloadSpec",
    "blame_field",
    "json_size",
    "parse_argv",
    "parse_env",
]

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
KINDS = ("batch", "service", "analytics", "inference")
# Local restarts by the agent (edge_agent/restarts.py); restart_policy takes RESTART_POLICIES,
# defined with the run command in edgeplane_contract/messages.py.
DEFAULT_MAX_RESTARTS = 5
MAX_MAX_RESTARTS = 10_000
_TOP_KEYS = {
    "name",
    "command",
    "env",
    "resources",
    "replicas",
    "priority",
    "affinity",
    "anti_affinity",
    "gang",
    "kind",
    "sla_latency_s",
    "timeout_s",
    "restart_policy",
    "max_restarts",
}


def json_size(value: Any) -> int:
    """Bytes ``value`` takes in a NATS message (the codec escapes non-ASCII: up to 12 a character)."""
    return len(json.dumps(value))


def blame_field(sizes: dict[str, int]) -> str:
    """The field to name for a message that is too large: the biggest entry (``env.KEY``,
    ``command[2]``), or its whole group (``env``) when many small entries add up."""
    groups: dict[str, int] = {}
    for path, size in sizes.items():
        group = re.split(r"[.\[]", path, maxsplit=1)[0]
        groups[group] = groups.get(group, 0) + size
    group = max(groups, key=groups.__getitem__)
    biggest = max((p for p in sizes if re.split(r"[.\[]", p, maxsplit=1)[0] == group), key=sizes.__getitem__)
    return biggest if sizes[biggest] * 2 >= groups[group] else group


def parse_argv(value: Any, where: str = "command", *, every_non_empty: bool = False) -> list[str]:
    """An argv the OS can exec: a non-empty list of strings without NUL, the program non-empty."""
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(arg, str) and (arg or not every_non_empty) for arg in value)
        or not value[0]
    ):
        raise ValidationError("must be a non-empty list of strings (argv)", field=where)
    if any("\x00" in arg for arg in value):
        raise ValidationError("arguments cannot contain NUL characters", field=where)
    return list(value)


def parse_env(value: Any, where: str = "env") -> dict[str, str]:
    """Environment variables the OS can set: names non-empty without '=' or NUL, values without NUL."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValidationError("must be an object of string to string", field=where)
    for key, item in value.items():
        if not key or "=" in key or "\x00" in key or "\x00" in item:
            raise ValidationError(
                f"variable {key!r}: names are non-empty without '=' or NUL, values without NUL", field=where
            )
    return dict(value)


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError("must be a list of non-empty strings", field=where)
    return list(value)


@dataclass(slots=True)
class Affinity:
    clusters: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    node_labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, body: Any, where: str, *, allow_labels: bool = True) -> Affinity:
        if body is None:
            return cls()
        if not isinstance(body, dict):
            raise ValidationError("must be an object", field=where)
        allowed = {"clusters", "regions", "nodes"} | ({"node_labels"} if allow_labels else set())
        for key in body:
            if key not in allowed:
                raise ValidationError(
                    f"unknown key (allowed: {', '.join(sorted(allowed))})", field=f"{where}.{key}"
                )
        out = cls()
        for key in ("clusters", "regions", "nodes"):
            if key in body:
                setattr(out, key, _str_list(body[key], f"{where}.{key}"))
        if "node_labels" in body:
            labels = body["node_labels"]
            if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
            ):
                raise ValidationError("must be an object of string to string", field=f"{where}.node_labels")
            out.node_labels = dict(labels)
        return out


@dataclass(slots=True)
class WorkloadSpec:
    """A container-like workload: a command run as a local process on an edge node."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    resources: ResourceRequest = field(default_factory=ResourceRequest)
    replicas: int = 1
    priority: int = 0
    affinity: Affinity = field(default_factory=Affinity)
    anti_affinity: Affinity = field(default_factory=Affinity)
    gang: bool = False
    kind: str = "batch"
    sla_latency_s: float | None = None
    timeout_s: float | None = None
    restart_policy: str = "never"
    max_restarts: int = DEFAULT_MAX_RESTARTS

    @classmethod
    def parse(cls, body: Any) -> WorkloadSpec:
        """Validate a request body; raises ValidationError naming the first bad field."""
        if not isinstance(body, dict):
            raise ValidationError("request body must be a JSON object", field="<body>")
        for key in body:
            if key not in _TOP_KEYS:
                raise ValidationError(f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})", field=key)
        name = body.get("name")
        if name is None:
            raise ValidationError("is required", field="name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ValidationError(
                "must be 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending alphanumeric",
                field="name",
            )
        command = body.get("command")
        if command is None:
            raise ValidationError("is required", field="command")
        spec = cls(name=name, command=parse_argv(command))
        if "env" in body:
            spec.env = parse_env(body["env"])
        spec.resources = ResourceRequest.parse(body.get("resources"))
        spec.replicas = _int(body, "replicas", 1, 1, 1000)
        spec.priority = _int(body, "priority", 0, -1000, 1000)
        spec.affinity = Affinity.parse(body.get("affinity"), "affinity")
        spec.anti_affinity = Affinity.parse(body.get("anti_affinity"), "anti_affinity", allow_labels=False)
        if "gang" in body:
            if not isinstance(body["gang"], bool):
                raise ValidationError("must be true or false", field="gang")
            spec.gang = body["gang"]
        if "kind" in body:
            if body["kind"] not in KINDS:
                raise ValidationError(f"must be one of {', '.join(KINDS)}", field="kind")
            spec.kind = body["kind"]
        spec.sla_latency_s = _positive(body, "sla_latency_s")
        spec.timeout_s = _positive(body, "timeout_s")
        if "restart_policy" in body:
            if body["restart_policy"] not in RESTART_POLICIES:
                raise ValidationError(f"must be one of {', '.join(RESTART_POLICIES)}", field="restart_policy")
            spec.restart_policy = body["restart_policy"]
        spec.max_restarts = _int(body, "max_restarts", DEFAULT_MAX_RESTARTS, 0, MAX_MAX_RESTARTS)
        return spec

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def run_spec(self, gpu_indices: list[int]) -> RunSpec:
        """What the agent gets in the run command of one replica placed with these GPUs."""
        return RunSpec(
            command=self.command,
            env=self.env,
            cpu=self.resources.cpu,
            memory=self.resources.memory,
            gpu_indices=gpu_indices,
            mig=list(self.resources.mig),
            timeout_s=self.timeout_s,
            restart_policy=self.restart_policy,
            max_restarts=self.max_restarts,
            offer=self.offer(),
        )

    def check_fits(self, room: int) -> None:
        """Refuse (413, naming the field) a spec whose run command would exceed ``room`` bytes: NATS
        could never deliver it, and the workload would wait in Scheduled forever."""
        placeholder = "0" * 32  # the ids the hub makes are uuid4 hex
        command = CommandV1(
            command_id=placeholder,
            kind="run",
            placement_id=placeholder,
            workload_id=placeholder,
            spec=self.run_spec(gpu_indices=[]),
        )
        size = len(encode(command))
        if size <= room:
            return
        sizes = {f"command[{i}]": json_size(arg) for i, arg in enumerate(self.command)}
        sizes.update({f"env.{key}": json_size(key) + json_size(value) for key, value in self.env.items()})
        raise PayloadTooLargeError(
            f"the run command would be {size} bytes, over the {room} one NATS message can carry here "
            "(strings count JSON-escaped: up to 12 bytes a non-ASCII character)",
            field=blame_field(sizes),
        )

    def offer(self) -> OfferSpec:
        """One replica as a node's local policy sees it (bids, and the agent's restart decisions)."""
        resources = self.resources
        return OfferSpec(
            cpu=resources.cpu,
            memory=resources.memory,
            gpu=resources.gpu,
            mig=list(resources.mig),
            dpu=resources.dpu,
            # The policy knows service/function/batch/analytics; inference behaves like a service.
            kind={"inference": "service"}.get(self.kind, self.kind),
            sla_s=self.sla_latency_s,
            runtime_s=self.timeout_s,
            priority=self.priority,
        )

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> WorkloadSpec:
        """Rebuild from what ``to_dict`` stored (trusted: already validated once)."""
        spec = cls(name=data["name"], command=list(data["command"]))
        spec.env = dict(data.get("env") or {})
        spec.resources = ResourceRequest(**(data.get("resources") or {}))
        spec.replicas = int(data.get("replicas", 1))
        spec.priority = int(data.get("priority", 0))
        spec.affinity = Affinity(**(data.get("affinity") or {}))
        spec.anti_affinity = Affinity(**(data.get("anti_affinity") or {}))
        spec.gang = bool(data.get("gang", False))
        spec.kind = data.get("kind", "batch")
        spec.sla_latency_s = data.get("sla_latency_s")
        spec.timeout_s = data.get("timeout_s")
        # Specs stored before restarts existed have neither key.
        spec.restart_policy = data.get("restart_policy", "never")
        spec.max_restarts = int(data.get("max_restarts", DEFAULT_MAX_RESTARTS))
        return spec


def _int(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    if key not in body:
        return default
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(f"must be an integer between {low} and {high}", field=key)
    return value


# Seconds fields: at least a millisecond, since a subnormal SLA overflows the reward to infinity.
MIN_SECONDS, MAX_SECONDS = 0.001, 86400 * 365


def _positive(body: dict[str, Any], key: str) -> float | None:
    if key not in body or body[key] is None:
        return None
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("must be a number of seconds", field=key)
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        raise ValidationError(f"must be a number of seconds from {MIN_SECONDS} to {MAX_SECONDS}", field=key)
    return float(value)
