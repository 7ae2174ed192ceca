"""The function registration users POST: parsing and validation (errors name the field)."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from edgeplane_contract.messages import FunctionCode, InvokeV1, encode
from edgeplane_contract.resources import DEFAULT_EPHEMERAL_STORAGE, MIG_PROFILES, ResourceRequest

from controlplane.errors import PayloadTooLargeError, ValidationError
from controlplane.scheduling.model import WorkloadRequest
from controlplane.schema import Choice, Custom, Field, Integer, Model, Nested, Number, Text
from controlplane.specs.workload import (
    AFFINITY_WITHOUT_LABELS,
    CPU,
    ENV,
    NON_EMPTY,
    Affinity,
    blame_field,
    json_size,
    memory_kind,
    parse_argv,
    stored,
)

__all__ = ["FUNCTION", "FunctionSpec"]

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$")
MAX_SOURCE = 512 * 1024


@dataclass(slots=True)
class FunctionSpec:
    """One version of a function. Versions are immutable once registered."""

    name: str
    runtime: str = "python"
    version: int | None = None
    source: str = ""
    handler: str = ""
    path: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    memory: int = 128 * 2**20
    cpu: float = 0.1
    timeout_s: float = 30.0
    max_concurrency: int = 1
    gpu: int = 0
    mig: str | None = None
    sla_latency_ms: float | None = None
    affinity: Affinity = field(default_factory=Affinity)
    # Bytes an instance's work dir may hold (stored versions older than the field: the default).
    ephemeral_storage: int = DEFAULT_EPHEMERAL_STORAGE

    @classmethod
    def parse(cls, body: Any) -> FunctionSpec:
        """Validate a request body; raises ValidationError naming the first bad field."""
        return FUNCTION.parse(body)

    def code(self) -> FunctionCode:
        """This version as an agent gets it in every invocation and pre-warm."""
        assert self.version is not None
        return FunctionCode(
            name=self.name,
            version=self.version,
            runtime=self.runtime,
            handler=self.handler,
            source=self.source,
            path=self.path,
            command=list(self.command),
            env=dict(self.env),
            memory=self.memory,
            cpu=self.cpu,
            timeout_s=self.timeout_s,
            max_concurrency=self.max_concurrency,
            ephemeral_storage=self.ephemeral_storage,
        )

    def check_fits(self, room: int) -> None:
        """Refuse (413, naming the field) a function whose code leaves no room in one NATS message
        of ``room`` bytes for an invocation: every invoke would fail."""
        code = replace(self, version=self.version or 10**9).code()  # before numbering: the widest
        size = len(encode(InvokeV1(invocation_id="0" * 32, code=code)))
        if size <= room:
            return
        sizes = {key: json_size(getattr(self, key)) for key in ("source", "handler", "path")}
        sizes.update({f"command[{i}]": json_size(arg) for i, arg in enumerate(self.command)})
        sizes.update({f"env.{key}": json_size(key) + json_size(value) for key, value in self.env.items()})
        raise PayloadTooLargeError(
            f"the function's code would take {size} bytes of every invocation message, over the {room} "
            "one NATS message can carry here (strings count as UTF-8 JSON)",
            field=blame_field(sizes),
        )

    def instance_request(self) -> WorkloadRequest:
        """One instance of this version as the placement engine sees it (``functions`` profile)."""
        return WorkloadRequest(
            id=f"function:{self.name}:{self.version}",
            name=self.name,
            resources=ResourceRequest(
                cpu=self.cpu,
                memory=self.memory,
                gpu=self.gpu,
                mig=[self.mig] if self.mig else [],
                ephemeral_storage=self.ephemeral_storage,
            ),
            affinity=self.affinity,
            kind="function",
            sla_latency_s=self.sla_latency_ms / 1000 if self.sla_latency_ms is not None else None,
        )

    def content(self) -> dict[str, Any]:
        """What makes two registrations the same version (everything but the version number)."""
        data = asdict(self)
        data.pop("version")
        return data

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> FunctionSpec:
        values = dict(data)
        values["affinity"] = stored(Affinity, values.get("affinity"))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- The request model: each rule once, for the parser and the OpenAPI document --------------


def _python_source(value: Any, where: str) -> str:
    """Non-empty Python source that compiles, at most MAX_SOURCE bytes."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("must be non-empty Python source", field=where)
    if len(value.encode()) > MAX_SOURCE:
        raise ValidationError(f"larger than {MAX_SOURCE} bytes", field=where)
    try:
        ast.parse(value)
    except SyntaxError as exc:
        raise ValidationError(f"not valid Python: {exc.msg} (line {exc.lineno})", field=where) from None
    return value


def _top_level_names(source: str) -> set[str]:
    tree = ast.parse(source)
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)} | {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def _handler_is_found(values: Mapping[str, Any], where: str) -> None:
    """With source, the handler is a name defined at its top level; without, 'module:function'."""
    if values["runtime"] != "python":
        return
    handler = values["handler"]
    if values["source"]:
        if ":" in handler or handler not in _top_level_names(values["source"]):
            raise ValidationError(f"{handler!r} is not defined at the top level of source", field="handler")
    elif ":" not in handler:
        raise ValidationError("without source, handler must be 'module:function'", field="handler")


def _python(values: Mapping[str, Any]) -> bool:
    return bool(values["runtime"] == "python")


def _command(values: Mapping[str, Any]) -> bool:
    return bool(values["runtime"] == "command")


# The same conditions in JSON Schema: runtime absent is python.
_PYTHON_SCHEMA = {"properties": {"runtime": {"const": "python"}}}
_COMMAND_SCHEMA = {"required": ["runtime"], "properties": {"runtime": {"const": "command"}}}


FUNCTION: Model[FunctionSpec] = Model(
    "FunctionSpec",
    FunctionSpec,
    (
        Field(
            "name",
            Text("must be 1-63 lowercase letters, digits, '_' or '-'", NAME_RE),
            required=True,
            nullable=True,
        ),
        Field("runtime", Choice(("python", "command"), "must be 'python' or 'command'")),
        Field(
            "version",
            Integer(1, 10**9, "must be a positive integer"),
            nullable=True,
            description="omit to get the next version (numbers of deleted versions are not reused)",
        ),
        Field(
            "handler",
            Text("must be an identifier or 'module:function'", HANDLER_RE),
            required=True,
            required_message="is required: a function name in source, or 'module:function'",
            nullable=True,
            when=_python,
            when_schema=_PYTHON_SCHEMA,
            description="a name in source, or module:function (required for runtime python)",
        ),
        Field(
            "source",
            # Hand-written: that it compiles and defines the handler is checked, not stated.
            Custom(_python_source, {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE}),
            nullable=True,
            when=_python,
            check=_handler_is_found,
            description="Python source defining the handler (runtime python; at most "
            f"{MAX_SOURCE} bytes as UTF-8)",
        ),
        Field(
            "path",
            Text("must be a directory path on the agents", no_nul=True),
            when=lambda values: _python(values) and not values["source"],
            description="directory on the agents to import module:function from (without source)",
        ),
        Field(
            "command",
            # Hand-written: as ARGV, but every argument non-empty.
            Custom(
                lambda value, where: parse_argv(value, where, every_non_empty=True),
                {"type": "array", "items": NON_EMPTY, "minItems": 1},
            ),
            required=True,
            required_message="is required for runtime 'command'",
            nullable=True,
            when=_command,
            when_schema=_COMMAND_SCHEMA,
            description="argv (required for runtime command)",
        ),
        Field("env", ENV),
        Field("memory", memory_kind(16 * 2**20, "must be at least 16Mi")),
        Field("cpu", CPU),
        Field(
            "timeout_s",
            Number("must be a number of seconds in (0, 900]", 0, 900, exclusive_low=True),
        ),
        Field("max_concurrency", Integer(1, 1000)),
        Field("gpu", Integer(0, 8)),
        Field(
            "mig",
            Choice(tuple(MIG_PROFILES), f"unknown MIG profile; known: {', '.join(MIG_PROFILES)}"),
            nullable=True,
        ),
        Field(
            "sla_latency_ms",
            Number("must be a positive number of milliseconds", 0, exclusive_low=True),
            nullable=True,
        ),
        Field("affinity", Nested(AFFINITY_WITHOUT_LABELS), nullable=True),
        Field(
            "ephemeral_storage",
            memory_kind(1, "must be a positive amount of storage"),
            description="bytes an instance's work dir may hold (over it the agent stops the instance); "
            "default 1Gi",
        ),
    ),
    example={
        "name": "echo",
        "source": "def handler(event, context):\n    return event\n",
        "handler": "handler",
    },
)
