"""The workload spec users POST: parsing, validation (errors name the field) and storage form.

Over 400 lines: the spec and its request model (each rule once, for the parser and the OpenAPI
document), with the quantities and argv/env kinds the function spec reuses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from edgeplane_contract.messages import RESTART_POLICIES, CommandV1, OfferSpec, RunSpec, encode
from edgeplane_contract.resources import MIG_PROFILES, ResourceRequest, parse_cpu, parse_memory

from controlplane.errors import PayloadTooLargeError, ValidationError
from controlplane.scheduling.model import (
    PLACEMENT_TERMS,
    Affinity,
    AntiAffinity,
    PlacementTerms,
    WorkloadRequest,
)
from controlplane.schema import (
    Boolean,
    Choice,
    Custom,
    Field,
    Integer,
    Model,
    Nested,
    Number,
    StringList,
    StringMap,
    Text,
)

__all__ = [
    "AFFINITY",
    "AFFINITY_WITHOUT_LABELS",
    "ANTI_AFFINITY",
    "CPU",
    "RESOURCES",
    "RESTART_POLICIES",
    "WORKLOAD",
    "Affinity",
    "AntiAffinity",
    "WorkloadSpec",
    "blame_field",
    "json_size",
    "memory_kind",
    "parse_affinity",
    "parse_argv",
    "parse_env",
    "stored",
]

T = TypeVar("T")

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
KINDS = ("batch", "service", "analytics", "inference")
# The scheduler knows inference as a latency-bound service.
SCHEDULER_KIND = {"batch": "batch", "service": "service", "analytics": "analytics", "inference": "service"}
# Local restarts by the agent (edge_agent/restarts.py); restart_policy takes RESTART_POLICIES,
# defined with the run command in edgeplane_contract/messages.py.
DEFAULT_MAX_RESTARTS = 5
# More than a run command takes besides its argv, env and MIG lists (ids, numbers, short words;
# about 700 bytes): below room minus this, a spec fits without building the command.
FIXED_COMMAND_BYTES = 4096
MAX_MAX_RESTARTS = 10_000


def json_size(value: Any) -> int:
    """Bytes ``value`` takes in a NATS message (the codec writes UTF-8 JSON: up to 4 a character,
    6 for a control character it escapes)."""
    return len(encode(value))


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


def parse_affinity(body: Any, where: str, *, allow_labels: bool = True) -> Affinity:
    """``body`` (None: no constraint) as the affinity at ``where``; labels only if allowed."""
    if body is None:
        return Affinity()
    return (AFFINITY if allow_labels else AFFINITY_WITHOUT_LABELS).parse(body, where)


def stored(cls: type[T], data: Mapping[str, Any] | None) -> T:
    """A stored dataclass, keeping only the keys it has (stored by an older hub: extra keys)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in (data or {}).items() if k in names})


@dataclass(slots=True)
class WorkloadSpec(PlacementTerms):
    """A container-like workload: a command run as a local process on an edge node.

    Its placement terms (resources, replicas, priority, affinity, anti-affinity, gang, SLA) are the
    scheduler's own (``scheduling.model.PlacementTerms``): one model from the API to the scheduler,
    and :meth:`request` hands them over as they are."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    kind: str = "batch"
    timeout_s: float | None = None
    # How long one replica runs alone on an idle node, when the user knows: the hub learns
    # interference from observed runtimes against it (``hub.learning``); None: from history.
    expected_runtime_s: float | None = None
    restart_policy: str = "never"
    max_restarts: int = DEFAULT_MAX_RESTARTS

    @classmethod
    def parse(cls, body: Any) -> WorkloadSpec:
        """Validate a request body; raises ValidationError naming the first bad field."""
        return WORKLOAD.parse(body)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {key: data[key] for key in _STORED_ORDER}  # what to run first, as users write it

    def request(self, workload_id: str) -> WorkloadRequest:
        """This workload as the scheduler places it (its run time the expected one, else bounded
        by ``timeout_s``)."""
        expected = self.expected_runtime_s if self.expected_runtime_s is not None else self.timeout_s
        return WorkloadRequest(
            workload_id,
            name=self.name,
            kind=self.scheduler_kind(),
            expected_runtime_s=expected,
            **self.placement_terms(),
        )

    def scheduler_kind(self) -> str:
        """The kind the scheduler knows this workload as (its interference sensitivity's key)."""
        return SCHEDULER_KIND.get(self.kind, "batch")

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
            ephemeral_storage=self.resources.ephemeral_storage,
        )

    def check_fits(self, room: int) -> None:
        """Refuse (413, naming the field) a spec whose run command would exceed ``room`` bytes: NATS
        could never deliver it, and the workload would wait in Scheduled forever."""
        # Only the argv, env and MIG lists are unbounded; every other field of the command is a
        # number or a short word. Well within the room by that bound: no command is built.
        unbounded = json_size(self.command) + json_size(self.env) + 2 * json_size(self.resources.mig)
        if unbounded + FIXED_COMMAND_BYTES <= room:
            return
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
            "(strings count as UTF-8 JSON: up to 4 bytes a character)",
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
        spec.affinity = stored(Affinity, data.get("affinity"))
        spec.anti_affinity = stored(AntiAffinity, data.get("anti_affinity"))
        spec.gang = bool(data.get("gang", False))
        spec.kind = data.get("kind", "batch")
        spec.sla_latency_s = data.get("sla_latency_s")
        spec.timeout_s = data.get("timeout_s")
        spec.expected_runtime_s = data.get("expected_runtime_s")  # absent in older stored specs
        # Specs stored before restarts existed have neither key.
        spec.restart_policy = data.get("restart_policy", "never")
        spec.max_restarts = int(data.get("max_restarts", DEFAULT_MAX_RESTARTS))
        return spec


_STORED_ORDER = (
    "name",
    "command",
    "env",
    *(term for term in PLACEMENT_TERMS if term != "sla_latency_s"),
    "kind",
    "sla_latency_s",
    "timeout_s",
    "expected_runtime_s",
    "restart_policy",
    "max_restarts",
)

# --- The request models: each rule once, for the parser and the OpenAPI document -------------

# Seconds fields: at least a millisecond, since a subnormal SLA overflows the reward to infinity.
MIN_SECONDS, MAX_SECONDS = 0.001, 86400 * 365
NON_EMPTY: dict[str, Any] = {"type": "string", "minLength": 1}

# Hand-written schemas of the quantities the contract parses (parse_cpu, parse_memory): their
# bounds live there; tests/unit/spine/test_request_models.py checks each boundary against both.
CPU = Custom(
    lambda value, where: parse_cpu(value, field_name=where),
    {
        "oneOf": [
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
            {"type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?m?\\s*$", "example": "500m"},
        ]
    },
)


def memory_kind(minimum: int, message: str) -> Custom:
    """Memory (bytes, or a string like '64Mi') of at least ``minimum`` bytes."""

    def parse(value: Any, where: str) -> int:
        amount = parse_memory(value, field_name=where)
        if amount < minimum:
            raise ValidationError(message, field=where)
        return amount

    return Custom(
        parse,
        {
            "oneOf": [
                {"type": "integer", "minimum": minimum, "maximum": 2**60},
                {
                    "type": "string",
                    "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*(Ki|Mi|Gi|Ti|[kKMGT])?\\s*$",
                    "example": "64Mi",
                },
            ]
        },
    )


# Hand-written: JSON Schema cannot say "the program is non-empty and no argument holds NUL" beyond
# the first item's length; parse_argv enforces the rest.
ARGV = Custom(
    parse_argv,
    {
        "type": "array",
        "prefixItems": [NON_EMPTY],
        "items": {"type": "string"},
        "minItems": 1,
        "description": "argv; the program must be non-empty",
    },
)
# Hand-written: parse_env also refuses NUL in names and values, which the pattern leaves unsaid.
ENV = Custom(
    parse_env,
    {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"type": "string", "pattern": "^[^=]+$"},
    },
)


def _mig(value: Any, where: str) -> list[str]:
    profiles = [value] if isinstance(value, str) else value
    if not isinstance(profiles, list) or not all(isinstance(p, str) for p in profiles):
        raise ValidationError("must be a MIG profile name or a list of them", field=where)
    for profile in profiles:
        if profile not in MIG_PROFILES:
            raise ValidationError(
                f"unknown MIG profile {profile!r}; known: {', '.join(MIG_PROFILES)}", field=where
            )
    return list(profiles)


def _whole_gpus_or_mig(values: Mapping[str, Any], where: str) -> None:
    if values["mig"] and values["gpu"]:
        raise ValidationError("ask for whole GPUs or MIG slices, not both", field=f"{where}.mig")


def _first_unknown_sorted(unknown: list[str], allowed: list[str]) -> tuple[str, str]:
    key = sorted(unknown)[0]
    return key, f"unknown key {key!r}"


_PROFILE = {"type": "string", "enum": list(MIG_PROFILES)}
RESOURCES = Model(
    "Resources",
    ResourceRequest,
    (
        Field("cpu", CPU),
        Field("memory", memory_kind(1, "must be a positive amount of memory")),
        Field(
            "ephemeral_storage",
            memory_kind(1, "must be a positive amount of storage"),
            description="bytes the work dir may hold, counted by placement and enforced by the agent "
            "(over it the replica fails with ephemeral_storage_exceeded); default 1Gi",
        ),
        Field("gpu", Integer(0, 64)),
        Field("dpu", Integer(0, 64)),
        Field(
            "mig",
            Custom(_mig, {"oneOf": [_PROFILE, {"type": "array", "items": _PROFILE}]}),
            check=_whole_gpus_or_mig,
            description="MIG slices instead of whole GPUs (not with gpu)",
        ),
    ),
    unknown=_first_unknown_sorted,
)

_AFFINITY_LISTS = (
    Field("clusters", StringList(), description="known clusters only"),
    Field("regions", StringList()),
    Field("nodes", StringList()),
)
AFFINITY = Model(
    "Affinity",
    Affinity,
    (
        *_AFFINITY_LISTS,
        Field("node_labels", StringMap(), description="labels a node must have"),
        Field(
            "preferred_labels", StringMap(), description="labels a node should have (a score, not a filter)"
        ),
    ),
)
# A function's affinity: no labels (stored there as {}).
AFFINITY_WITHOUT_LABELS = Model("AffinityWithoutLabels", Affinity, _AFFINITY_LISTS)
ANTI_AFFINITY = Model(
    "AntiAffinity",
    AntiAffinity,
    (
        *_AFFINITY_LISTS,
        Field("spread_replicas", Boolean(), description="no two replicas on one node"),
    ),
)


def _seconds(name: str, description: str = "") -> Field:
    return Field(
        name,
        Number(
            "must be a number of seconds",
            MIN_SECONDS,
            MAX_SECONDS,
            range_message=f"must be a number of seconds from {MIN_SECONDS} to {MAX_SECONDS}",
        ),
        nullable=True,
        description=description,
    )


WORKLOAD: Model[WorkloadSpec] = Model(
    "WorkloadSpec",
    WorkloadSpec,
    (
        Field(
            "name",
            Text(
                "must be 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending alphanumeric",
                NAME_RE,
            ),
            required=True,
            nullable=True,
        ),
        Field("command", ARGV, required=True, nullable=True),
        Field("env", ENV),
        Field("resources", Nested(RESOURCES), nullable=True),
        Field("replicas", Integer(1, 1000)),
        Field("priority", Integer(-1000, 1000)),
        Field("affinity", Nested(AFFINITY), nullable=True),
        Field("anti_affinity", Nested(ANTI_AFFINITY), nullable=True),
        Field("gang", Boolean()),
        Field("kind", Choice(KINDS)),
        _seconds("sla_latency_s"),
        _seconds("timeout_s"),
        _seconds(
            "expected_runtime_s",
            "how long one replica runs alone on an idle node; the hub learns interference from "
            "observed runtimes against it (omitted: from the workload's earlier runs)",
        ),
        Field(
            "restart_policy",
            Choice(RESTART_POLICIES),
            description="when the agent restarts the process itself (also without the hub)",
        ),
        Field("max_restarts", Integer(0, MAX_MAX_RESTARTS)),
    ),
    example={"name": "hello", "command": ["echo", "hello"], "resources": {"cpu": "250m", "memory": "64Mi"}},
)
