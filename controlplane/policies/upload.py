"""The ``POST /v1/policies`` body: a model (base64 of the ONNX file) and its ``metadata.json``."""

from __future__ import annotations

import base64
import binascii
import itertools
from dataclasses import dataclass, field
from typing import Any

from controlplane.errors import ValidationError
from controlplane.schema import Custom, Field, Integer, Model, Number, StringList, StringMap

__all__ = [
    "CANARY",
    "CONTROLLER_FIELDS",
    "DEFAULT_MIN_AGREEMENT",
    "MAX_MODEL_BYTES",
    "POLICY_ROLLBACK",
    "POLICY_ROLLOUT",
    "POLICY_UPLOAD",
    "CanaryRequest",
    "PolicyRollback",
    "PolicyRollout",
    "PolicyUpload",
    "steps_field",
]

# The API takes bodies up to 1 MiB (base64 adds a third): the shipped int8 model is 68 kB.
MAX_MODEL_BYTES = 640 * 1024
# A new version must pick the same action as the version in force on at least this share of the
# held-out decisions unless the upload says otherwise: a model that disagrees on most of them
# is more likely a wrong file than an improvement, and a canary is where improvements show.
DEFAULT_MIN_AGREEMENT = 0.5


@dataclass(frozen=True, slots=True)
class PolicyUpload:
    model: bytes
    metadata: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    min_agreement: float = DEFAULT_MIN_AGREEMENT


def _model(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise ValidationError("must be the ONNX model file as base64", field=where)
    if len(value) > (MAX_MODEL_BYTES + 2) // 3 * 4:
        raise ValidationError(f"the model is larger than {MAX_MODEL_BYTES} bytes", field=where)
    try:
        blob = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError("is not valid base64", field=where) from None
    if not blob:
        raise ValidationError("must be the ONNX model file as base64", field=where)
    return blob


def _metadata(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError("must be the model's metadata.json object", field=where)
    return value


def _description(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > 200 or "\x00" in value:
        raise ValidationError("must be a string of at most 200 characters", field=where)
    return value


POLICY_UPLOAD: Model[PolicyUpload] = Model(
    "PolicyUpload",
    PolicyUpload,
    (
        Field(
            "model",
            Custom(
                _model,
                {
                    "type": "string",
                    "contentEncoding": "base64",
                    "minLength": 1,
                    "maxLength": (MAX_MODEL_BYTES + 2) // 3 * 4,
                },
            ),
            required=True,
            description=f"the ONNX model file, base64 (at most {MAX_MODEL_BYTES} bytes decoded)",
        ),
        Field(
            "metadata",
            Custom(_metadata, {"type": "object"}),
            required=True,
            description="the model's metadata.json (feature schema version, action space, ...)",
        ),
        Field("description", Custom(_description, {"type": "string", "maxLength": 200})),
        Field(
            "min_agreement",
            Number("must be a number from 0 to 1", low=0.0, high=1.0),
            description="the share of held-out decisions on which it must pick the same action "
            "as the version in force",
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class PolicyRollout:
    """Which nodes run a version as a canary: named ``nodes``, every node of ``clusters``, every
    node with all of ``labels`` (as it registered them), or a stable ``percent`` of all nodes (by
    a hash of the name: the same nodes each time)."""

    nodes: list[str] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    percent: int | None = None


def _one_target(values: Any, where: str) -> None:
    given = [k for k in ("nodes", "clusters", "labels", "percent") if values.get(k) not in (None, [], {})]
    if len(given) != 1:
        raise ValidationError(
            "give exactly one of nodes, clusters, labels or percent", field=where or "<body>"
        )


POLICY_ROLLOUT: Model[PolicyRollout] = Model(
    "PolicyRollout",
    PolicyRollout,
    (
        Field("nodes", StringList(), description="these nodes"),
        Field("clusters", StringList(), description="every node of these clusters"),
        Field("labels", StringMap(), description="every node that has all these labels (name: value)"),
        Field(
            "percent",
            Integer(1, 100, "must be an integer from 1 to 100"),
            nullable=True,
            check=_one_target,
            description="this share of all nodes, chosen by a hash of their names",
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class PolicyRollback:
    reason: str = ""


POLICY_ROLLBACK: Model[PolicyRollback] = Model(
    "PolicyRollback",
    PolicyRollback,
    (Field("reason", Custom(_description, {"type": "string", "maxLength": 200}), description="why"),),
)


@dataclass(frozen=True, slots=True)
class CanaryRequest:
    """``POST /v1/policies/{version}/canary``: the steps (percent of nodes) and the controller's
    rules (:class:`controlplane.rollout.controller.RolloutConfig`)."""

    steps: list[int] = field(default_factory=lambda: [10, 50, 100])
    dwell_s: float = 300.0
    threshold: float = 0.25
    sustain_s: float = 60.0
    min_samples: int = 30
    recent: int = 30
    window: int = 300
    baseline_floor: float = 0.01
    drain_window_s: float = 60.0
    drain_span_s: float = 600.0


def steps_field(of: str, description: str) -> Field:
    """A canary request's ``steps``: rising percents (1-100) of ``of`` (nodes, workloads)."""

    def parse(value: Any, where: str) -> list[int]:
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100 for v in value)
            or any(b <= a for a, b in itertools.pairwise(value))
        ):
            raise ValidationError(
                f"must be rising percents of {of}, 1 to 100 (e.g. [10, 50, 100])", field=where
            )
        return list(value)

    schema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 100}, "minItems": 1}
    return Field("steps", Custom(parse, schema), description=description)


# The canary controller's rules (controlplane.rollout.controller.RolloutConfig), as every canary
# request names them.
CONTROLLER_FIELDS: tuple[Field, ...] = (
    Field("dwell_s", Number("must be a number from 0 to 86400", low=0.0, high=86400.0)),
    Field(
        "threshold",
        Number("must be a number above 0 and at most 100", low=0.0, high=100.0, exclusive_low=True),
        description="the canary's anomaly score above which it is rolled back (when sustained)",
    ),
    Field("sustain_s", Number("must be a number from 0 to 86400", low=0.0, high=86400.0)),
    Field("min_samples", Integer(1, 100_000)),
    Field("recent", Integer(1, 10_000), description="samples in a group's current value"),
    Field("window", Integer(1, 100_000), description="control samples in the baseline's window"),
)


CANARY: Model[CanaryRequest] = Model(
    "CanaryRequest",
    CanaryRequest,
    (
        steps_field("nodes", "the canary's share of nodes, step by step (rising); after the last, promote"),
        *CONTROLLER_FIELDS,
        Field(
            "baseline_floor",
            Number("must be a number from 0 to 10", low=0.0, high=10.0),
            description="the least baseline (the regret of a policy that decides as the objective is 0)",
        ),
        Field(
            "drain_window_s",
            Number("must be a number of seconds from 0.1 to 3600", low=0.1, high=3600.0),
            description="the energy guard: a drain sample per node on battery this often (default 60)",
        ),
        Field(
            "drain_span_s",
            Number("must be a number of seconds from 1 to 86400", low=1.0, high=86400.0),
            description="the energy guard: each sample's drain is over this span (default 600; whole "
            "battery percents need minutes to show a rate)",
        ),
    ),
)
