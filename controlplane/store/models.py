"""SQLAlchemy 2 ORM models: clusters, nodes, workloads, placements and the event log.

Timestamps are float seconds since the epoch (UTC): exact on every backend, rendered as
ISO 8601 by the API. The schema is created only through the alembic migrations in ``migrations/``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from controlplane.store.secrets import SealedSpec

__all__ = [
    "ApiTokenRow",
    "Base",
    "ClusterRow",
    "EventRow",
    "FunctionRow",
    "HubLeadershipRow",
    "InvocationRow",
    "JoinTokenRow",
    "NodeCredentialRow",
    "NodeRow",
    "PlacementRow",
    "PolicyCanaryRow",
    "ProfileCanaryRow",
    "RuntimeObservationRow",
    "WorkloadRow",
]


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ClusterRow(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    region: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16), default="Unknown")
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_at: Mapped[float] = mapped_column(Float)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63), index=True)
    status: Mapped[str] = mapped_column(String(16), default="Ready")
    node_type: Mapped[str] = mapped_column(String(16), default="edge")
    boot_id: Mapped[str] = mapped_column(String(64), default="")
    agent_version: Mapped[str] = mapped_column(String(32), default="")
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    telemetry: Mapped[dict[str, Any]] = mapped_column(default=dict)
    power_source: Mapped[str] = mapped_column(String(16), default="unknown")
    battery_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_interval_s: Mapped[float] = mapped_column(Float, default=2.0)
    # What the agent could enforce on user code (clean env, run-as user, cgroup, pids limit...).
    isolation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    registered_at: Mapped[float] = mapped_column(Float)
    last_heartbeat_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class WorkloadRow(Base):
    __tablename__ = "workloads"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True, default="Pending")
    # JSON; its env values sealed when the engine has a secrets key (store/secrets.py).
    spec: Mapped[dict[str, Any]] = mapped_column(SealedSpec, default=dict)
    replicas: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class PlacementRow(Base):
    """One attempt at running one replica of a workload on one node."""

    __tablename__ = "placements"
    __table_args__ = (Index("ix_placements_workload_replica", "workload_id", "replica"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    workload_id: Mapped[str] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    replica: Mapped[int] = mapped_column(Integer, default=0)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    node: Mapped[str] = mapped_column(String(63), index=True)
    cluster: Mapped[str] = mapped_column(String(63))
    # Scheduled -> Running -> Succeeded | Failed | Cancelled; Lost when its node's lease expired.
    status: Mapped[str] = mapped_column(String(16), index=True, default="Scheduled")
    command_id: Mapped[str] = mapped_column(String(32))
    acked: Mapped[bool] = mapped_column(Boolean, default=False)
    stop_command_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    stop_acked: Mapped[bool] = mapped_column(Boolean, default=False)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    # How often the agent restarted the process locally (the workload's restart_policy).
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    assignment: Mapped[dict[str, Any]] = mapped_column(default=dict)
    explanation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    scheduled_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)


class RuntimeObservationRow(Base):
    """One successful placement's observed runtime and its node's CPU load meanwhile (from the
    agent's report): what the interference estimate is refitted from at start (``hub.learning``)."""

    __tablename__ = "runtime_observations"
    __table_args__ = (Index("ix_runtime_observations_history", "workload_name", "kind", "quiet"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # One observation per placement: a replayed report cannot add a second.
    placement_id: Mapped[str] = mapped_column(String(32), unique=True)
    workload_id: Mapped[str] = mapped_column(String(32))
    workload_name: Mapped[str] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(16))
    node: Mapped[str] = mapped_column(String(63))
    runtime_s: Mapped[float] = mapped_column(Float)
    # The solo runtime it was compared with (the spec's, else the history's); None: none known.
    expected_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    load_seconds: Mapped[list[Any]] = mapped_column(default=list)
    # Nearly all of the run below the lowest candidate knee: a solo-runtime baseline for later runs.
    quiet: Mapped[bool] = mapped_column(Boolean, default=False)
    cpu_pressure: Mapped[float | None] = mapped_column(Float, nullable=True)
    observed_at: Mapped[float] = mapped_column(Float)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    kind: Mapped[str] = mapped_column(String(48), index=True)
    object_kind: Mapped[str] = mapped_column(String(16))
    object_id: Mapped[str] = mapped_column(String(63), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)


class FunctionRow(Base):
    """One immutable version of a serverless function."""

    __tablename__ = "functions"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(SealedSpec, default=dict)  # env sealed, as workloads
    created_at: Mapped[float] = mapped_column(Float)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)


class InvocationRow(Base):
    """An invocation: asynchronous (``?async=1``) or synchronous with an Idempotency-Key (queued,
    then its result), or any other synchronous one once it finished (written behind,
    ``serverless/history.py``); finished ones are deleted after ``invocation_retention_s``."""

    __tablename__ = "invocations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    function: Mapped[str] = mapped_column(String(63), index=True)
    version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="Queued")  # Queued | Running | Succeeded | Failed
    node: Mapped[str | None] = mapped_column(String(63), nullable=True)
    cold_start: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    event: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[dict[str, Any]] = mapped_column(default=dict)
    timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[float] = mapped_column(Float, index=True)  # a starting hub replays the latest
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # A client's Idempotency-Key: a retried invocation with the same key is the same invocation.
    idempotency_key: Mapped[str | None] = mapped_column(String(128), nullable=True, unique=True, index=True)


class ApiTokenRow(Base):
    """An API bearer token: only its SHA-256 is kept; the token itself is shown once at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JoinTokenRow(Base):
    """A short-lived, single-use agent enrolment token for one cluster (only its hash is kept)."""

    __tablename__ = "join_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    cluster: Mapped[str] = mapped_column(String(63))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    used_by: Mapped[str | None] = mapped_column(String(63), nullable=True)
    # The one node name it may enrol (``agent-token create --node``, a rekey); None: any name
    # that is not enrolled.
    node: Mapped[str | None] = mapped_column(String(63), nullable=True)


class NodeCredentialRow(Base):
    """A node's NATS identity: its nkey public key (the seed never leaves the agent)."""

    __tablename__ = "node_credentials"

    node: Mapped[str] = mapped_column(String(63), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63))
    public_key: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # What the node claimed at its first registration with this key ({"cpu", "memory", "gpus",
    # "dpu"}): it may not claim more later (hub/registration.py) until an admin approves it
    # (``controlplane node approve-capacity``) or re-keys it. None: not registered yet.
    capacity: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class PolicyRow(Base):
    """A version of the agents' local policy (an ONNX model and its metadata), as uploaded with
    ``POST /v1/policies`` after its checks (controlplane/policies). Versions are never reused;
    the model's bytes are kept so that agents can fetch it."""

    __tablename__ = "policies"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    size: Mapped[int] = mapped_column(Integer)
    model: Mapped[bytes] = mapped_column(LargeBinary)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    description: Mapped[str] = mapped_column(String(200), default="")
    # The held-out check against the version current at upload: agreement, mean rewards, cases.
    evaluation: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(63))
    # "available" (kept, runs nowhere by the hub's choice), "promoted" (the fleet's version: at
    # most one), "rolled_back" (taken off by an operator or the canary controller).
    state: Mapped[str] = mapped_column(String(16), default="available")


class PolicyAssignmentRow(Base):
    """A node told to run a policy version other than the fleet's (a canary, ``rollout``); a
    node without a row runs the promoted version (or the shipped model when none is)."""

    __tablename__ = "policy_assignments"

    node: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(ForeignKey("policies.version"), index=True)
    assigned_at: Mapped[float] = mapped_column(Float)
    assigned_by: Mapped[str] = mapped_column(String(63))


class HubLeadershipRow(Base):
    """The one row (``id`` 1) naming the hub that leads a shared (PostgreSQL) store: each new
    leader takes the next ``generation``, and every write it commits checks it still holds that
    generation (``controlplane/coordination/fencing.py``); ``api_url`` is where the other
    replicas forward the API to."""

    __tablename__ = "hub_leadership"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    generation: Mapped[int] = mapped_column(BigInteger)
    hub_id: Mapped[str] = mapped_column(String(63))
    api_url: Mapped[str] = mapped_column(String(255))
    since: Mapped[float] = mapped_column(Float)


class PolicyCanaryRow(Base):
    """A live canary as far as it has gone (``controlplane/policies/canary_live.py``): its
    settings, the step it reached, the nodes it runs on and its timeline. A hub that starts (a
    restart, or a standby taking over) resumes the one still in state ``canary``."""

    __tablename__ = "policy_canaries"

    version: Mapped[int] = mapped_column(ForeignKey("policies.version"), primary_key=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    started_at: Mapped[float] = mapped_column(Float)
    started_by: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16))  # canary | promoted | rolled_back
    step: Mapped[int] = mapped_column(Integer)
    fraction: Mapped[float] = mapped_column(Float)
    nodes: Mapped[list[Any]] = mapped_column(JSON)
    events: Mapped[list[Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class ProfileCanaryRow(Base):
    """A scheduling profile canary as far as it has gone (``controlplane/policies/profile_canary.py``):
    the candidate, the profile in force it was compared with, the ``--scheduler`` profile of the
    hub that ran it (``base``), its rules, the step it reached and its timeline. A hub that starts
    places with the newest promoted candidate whose base is its own ``--scheduler`` profile, and
    resumes the one still in state ``canary``."""

    __tablename__ = "profile_canaries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(63))
    candidate: Mapped[dict[str, Any]] = mapped_column(JSON)
    previous: Mapped[dict[str, Any]] = mapped_column(JSON)
    base: Mapped[dict[str, Any]] = mapped_column(JSON)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    started_at: Mapped[float] = mapped_column(Float)
    started_by: Mapped[str] = mapped_column(String(63))
    state: Mapped[str] = mapped_column(String(16), index=True)  # canary | promoted | rolled_back
    step: Mapped[int] = mapped_column(Integer)
    fraction: Mapped[float] = mapped_column(Float)
    events: Mapped[list[Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)
