"""The workload spec users POST: parsing, validation (errors name the field) and storage form."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from controlplane.bus.messages import RESTART_POLICIES, OfferSpec
from controlplane.errors import ValidationError
from controlplane.resources import ResourceRequest

__all__ = ["RESTART_POLICIES", "Affinity", "WorkloadSpec"]

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
KINDS = ("batch", "service", "analytics", "inference")
# Local restarts by the agent (edge_agent/restarts.py); restart_policy takes RESTART_POLICIES,
# defined with the run command in controlplane/bus/messages.py.
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
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(c, str) for c in command)
            or not command[0]
        ):
            raise ValidationError("must be a non-empty list of strings (argv)", field="command")
        spec = cls(name=name, command=list(command))
        if "env" in body:
            env = body["env"]
            if not isinstance(env, dict) or not all(
                isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items()
            ):
                raise ValidationError("must be an object of string to string", field="env")
            spec.env = dict(env)
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


def _positive(body: dict[str, Any], key: str) -> float | None:
    if key not in body or body[key] is None:
        return None
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400 * 365:
        raise ValidationError("must be a positive number of seconds", field=key)
    return float(value)
