"""The function registration users POST: parsing and validation (errors name the field)."""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from edgeplane_contract.messages import FunctionCode, InvokeV1, encode
from edgeplane_contract.resources import MIG_PROFILES, parse_cpu, parse_memory

from controlplane.errors import PayloadTooLargeError, ValidationError
from controlplane.hub.spec import Affinity, blame_field, json_size, parse_argv, parse_env

__all__ = ["FunctionSpec"]

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
HANDLER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$")
_KEYS = {
    "name",
    "version",
    "runtime",
    "source",
    "handler",
    "path",
    "command",
    "env",
    "memory",
    "cpu",
    "timeout_s",
    "max_concurrency",
    "gpu",
    "mig",
    "sla_latency_ms",
    "affinity",
}
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

    @classmethod
    def parse(cls, body: Any) -> FunctionSpec:
        if not isinstance(body, dict):
            raise ValidationError("request body must be a JSON object", field="<body>")
        for key in body:
            if key not in _KEYS:
                raise ValidationError(f"unknown key (allowed: {', '.join(sorted(_KEYS))})", field=key)
        name = body.get("name")
        if name is None:
            raise ValidationError("is required", field="name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ValidationError("must be 1-63 lowercase letters, digits, '_' or '-'", field="name")
        spec = cls(name=name)
        runtime = body.get("runtime", "python")
        if runtime not in ("python", "command"):
            raise ValidationError("must be 'python' or 'command'", field="runtime")
        spec.runtime = runtime
        if "version" in body and body["version"] is not None:
            version = body["version"]
            if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 10**9:
                raise ValidationError("must be a positive integer", field="version")
            spec.version = version
        if runtime == "python":
            spec._parse_python(body)
        else:
            command = body.get("command")
            if command is None:
                raise ValidationError("is required for runtime 'command'", field="command")
            spec.command = parse_argv(command, every_non_empty=True)
        if "env" in body:
            spec.env = parse_env(body["env"])
        if "memory" in body:
            spec.memory = parse_memory(body["memory"], field_name="memory")
            if spec.memory < 16 * 2**20:
                raise ValidationError("must be at least 16Mi", field="memory")
        if "cpu" in body:
            spec.cpu = parse_cpu(body["cpu"], field_name="cpu")
        if "timeout_s" in body:
            timeout = body["timeout_s"]
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 900:
                raise ValidationError("must be a number of seconds in (0, 900]", field="timeout_s")
            spec.timeout_s = float(timeout)
        if "max_concurrency" in body:
            value = body["max_concurrency"]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise ValidationError("must be an integer between 1 and 1000", field="max_concurrency")
            spec.max_concurrency = value
        if "gpu" in body:
            gpu = body["gpu"]
            if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 8:
                raise ValidationError("must be an integer between 0 and 8", field="gpu")
            spec.gpu = gpu
        if body.get("mig") is not None:
            if body["mig"] not in MIG_PROFILES:
                raise ValidationError(f"unknown MIG profile; known: {', '.join(MIG_PROFILES)}", field="mig")
            spec.mig = body["mig"]
        if body.get("sla_latency_ms") is not None:
            sla = body["sla_latency_ms"]
            if isinstance(sla, bool) or not isinstance(sla, int | float) or sla <= 0:
                raise ValidationError("must be a positive number of milliseconds", field="sla_latency_ms")
            spec.sla_latency_ms = float(sla)
        spec.affinity = Affinity.parse(body.get("affinity"), "affinity", allow_labels=False)
        return spec

    def _parse_python(self, body: dict[str, Any]) -> None:
        handler = body.get("handler")
        if handler is None:
            raise ValidationError(
                "is required: a function name in source, or 'module:function'", field="handler"
            )
        if not isinstance(handler, str) or not HANDLER_RE.match(handler):
            raise ValidationError("must be an identifier or 'module:function'", field="handler")
        self.handler = handler
        source = body.get("source")
        if source is not None:
            if not isinstance(source, str) or not source.strip():
                raise ValidationError("must be non-empty Python source", field="source")
            if len(source.encode()) > MAX_SOURCE:
                raise ValidationError(f"larger than {MAX_SOURCE} bytes", field="source")
            try:
                tree = ast.parse(source)
            except SyntaxError as exc:
                raise ValidationError(
                    f"not valid Python: {exc.msg} (line {exc.lineno})", field="source"
                ) from None
            defined = {
                node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            } | {
                t.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
            if ":" in handler or handler not in defined:
                raise ValidationError(
                    f"{handler!r} is not defined at the top level of source", field="handler"
                )
            self.source = source
        else:
            if ":" not in handler:
                raise ValidationError("without source, handler must be 'module:function'", field="handler")
            path = body.get("path", "")
            if not isinstance(path, str) or "\x00" in path:
                raise ValidationError("must be a directory path on the agents", field="path")
            self.path = path

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
            "one NATS message can carry here (strings count JSON-escaped)",
            field=blame_field(sizes),
        )

    def content(self) -> dict[str, Any]:
        """What makes two registrations the same version (everything but the version number)."""
        data = asdict(self)
        data.pop("version")
        return data

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> FunctionSpec:
        values = dict(data)
        values["affinity"] = Affinity(**(values.get("affinity") or {}))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
