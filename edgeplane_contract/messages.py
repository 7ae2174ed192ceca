"""Every NATS subject and message of edgeplane, versioned, in one place.

Subjects (``{prefix}`` is the cluster's subject prefix, ``edgeplane.v1`` by default)::

    {prefix}.{cluster}.node.{node}.register    agent -> hub   RegisterV1      request/reply (RegisterAckV1)
    {prefix}.{cluster}.node.{node}.heartbeat   agent -> hub   HeartbeatV1     publish
    {prefix}.{cluster}.node.{node}.report      agent -> hub   StatusReportV1  request/reply (ReportAckV1)
    {prefix}.{cluster}.node.{node}.cmd         hub -> agent   CommandV1       request/reply (CommandAckV1)
    {prefix}.{cluster}.node.{node}.fn.invoke   hub -> agent   InvokeV1        request/reply (InvokeResultV1)
    {prefix}.{cluster}.node.{node}.fn.prewarm  hub -> agent   PrewarmV1       request/reply (PrewarmAckV1)
    {prefix}.{cluster}.node.{node}.fn.query    hub -> agent   InvocationQueryV1 request/reply (...StatusV1)
    {prefix}.{cluster}.node.{node}.fn.retire   hub -> agent   RetireV1        request/reply (RetireAckV1)
    {prefix}.{cluster}.node.{node}.logs        hub -> agent   LogRequestV1    request/reply (LogChunkV1)
    {prefix}.{cluster}.node.{node}.bid         hub -> agent   BidRequestV1    request/reply (BidV1)
    {prefix}.hub.hello                         hub -> agents  HubHelloV1      publish (agents re-register)

Every message is a JSON object with ``"v": 1``. A decoder rejects unknown versions, missing or
mistyped fields with :class:`MessageError`; the receiver counts, logs and drops such a message.
Commands carry a unique ``command_id`` and reports a unique ``report_id``: receivers remember what
they processed, so a duplicate or a replay changes nothing.

Longer than 400 lines on purpose: the wire contract is read as a whole (every subject and message
type, one version); the codec that checks them is ``edgeplane_contract.codec``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from edgeplane_contract.codec import SCHEMA_VERSION, MessageError, decode, encode, parse
from edgeplane_contract.resources import DEFAULT_EPHEMERAL_STORAGE

__all__ = [
    "DEFAULT_PREFIX",
    "NODE_SHUTDOWN",
    "RESTART_POLICIES",
    "BidRequestV1",
    "BidV1",
    "CommandAckV1",
    "CommandV1",
    "FunctionCode",
    "FunctionInstance",
    "GpuTelemetry",
    "HeartbeatV1",
    "HubHelloV1",
    "InvocationQueryV1",
    "InvocationStatusV1",
    "InvokeResultV1",
    "InvokeV1",
    "MessageError",
    "NodeResources",
    "OfferSpec",
    "PlacementState",
    "PolicyAckV1",
    "PolicyV1",
    "PrewarmAckV1",
    "PrewarmV1",
    "RegisterAckV1",
    "RegisterV1",
    "ReportAckV1",
    "RetireAckV1",
    "RetireV1",
    "RunSpec",
    "RuntimeObservation",
    "StatusReportV1",
    "Subjects",
    "Telemetry",
    "decode",
    "encode",
    "parse",
    "valid_token",
]

DEFAULT_PREFIX = "edgeplane.v1"
# RunSpec.restart_policy values: when the agent restarts a placement's process itself.
RESTART_POLICIES = ("never", "on-failure", "always")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def valid_token(name: str) -> bool:
    """A cluster or node name usable as one NATS subject token."""
    return bool(_TOKEN_RE.match(name))


@dataclass(frozen=True, slots=True)
class Subjects:
    """Subject names for one cluster under one prefix."""

    cluster: str
    prefix: str = DEFAULT_PREFIX

    def node(self, node: str, kind: str) -> str:
        return f"{self.prefix}.{self.cluster}.node.{node}.{kind}"

    def register(self, node: str) -> str:
        return self.node(node, "register")

    def heartbeat(self, node: str) -> str:
        return self.node(node, "heartbeat")

    def report(self, node: str) -> str:
        return self.node(node, "report")

    def command(self, node: str) -> str:
        return self.node(node, "cmd")

    def agent_wildcard(self, kind: str) -> str:
        """What the hub subscribes to for one kind of agent message in this cluster."""
        return f"{self.prefix}.{self.cluster}.node.*.{kind}"

    def invoke(self, node: str) -> str:
        return self.node(node, "fn.invoke")

    def prewarm(self, node: str) -> str:
        return self.node(node, "fn.prewarm")

    def bid(self, node: str) -> str:
        return self.node(node, "bid")

    def invocation_query(self, node: str) -> str:
        return self.node(node, "fn.query")

    def logs(self, node: str) -> str:
        return self.node(node, "logs")

    def retire(self, node: str) -> str:
        return self.node(node, "fn.retire")

    def policy(self, node: str) -> str:
        return self.node(node, "policy")

    def hub_hello(self) -> str:
        return f"{self.prefix}.hub.hello"

    @staticmethod
    def node_from_subject(subject: str, kind_tokens: int = 1) -> str:
        """The node token of ``...node.{node}.{kind}`` where kind has ``kind_tokens`` tokens."""
        parts = subject.split(".")
        index = len(parts) - 1 - kind_tokens
        return parts[index] if index >= 1 and parts[index - 1] == "node" else ""


# --- payload pieces -------------------------------------------------------------------------


@dataclass(slots=True)
class GpuTelemetry:
    index: int
    name: str
    uuid: str = ""
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    utilization_percent: float = 0.0
    power_w: float | None = None
    mig_enabled: bool = False
    mig_devices: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class NodeResources:
    """Capacity a node offers to edgeplane."""

    cpu: float
    memory: int
    gpus: list[GpuTelemetry] = field(default_factory=list)
    dpu: int = 0
    # Bytes units may write: the free space of the file system holding the agent's sandboxes at
    # registration. 0 (agents older than the field): not reported, the scheduler does not count it.
    ephemeral_storage: int = 0


@dataclass(slots=True)
class Telemetry:
    cpu_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    load_1m: float = 0.0
    power_source: str = "mains"  # mains | battery | unknown
    battery_percent: float | None = None
    # The node's draw and how it was had: battery (the battery's discharge reading), rapl (CPU
    # packages' energy counters plus the GPUs' NVML readings) or model (the node type's power
    # model at the measured CPU use); the hub shares it among the placements (energy per workload).
    power_w: float | None = None
    power_method: str = ""
    gpus: list[GpuTelemetry] = field(default_factory=list)
    # The objective weights (w1 util, w2 qos, w3 energy, w4 penalty) the node's local policy
    # uses now: w3 follows the power source and battery level.
    weights: list[float] = field(default_factory=list)
    policy: str = ""  # onnx-int8 | heuristic | "" (no local policy)


@dataclass(slots=True)
class RuntimeObservation:
    """What the agent saw of a placement's final, successful run (the hub learns interference
    from it: ``controlplane/hub/learning.py``).

    ``runtime_s``: wall time of the final run alone (earlier runs before local restarts are not
    counted: each restart runs the command from the start). ``load_seconds[j]``: seconds the node
    spent with its CPU busy fraction in bin ``j`` of ``BINS`` equal bins of [0, 1] during that run.
    ``cpu_pressure``: the mean of the node's ``/proc/pressure/cpu`` "some avg10" (as a fraction)
    over the run's samples, None where the kernel has no PSI.

    The codec checks types and finiteness; :meth:`invalid` the rest. A receiver that finds an
    invalid observation ignores and counts it but applies the report (rejecting the whole report
    would leave the agent resending it forever, and lose the placement's end).
    """

    BINS: ClassVar[int] = 10

    runtime_s: float
    load_seconds: list[float]
    cpu_pressure: float | None = None

    def invalid(self) -> str | None:
        """Why this observation cannot be used (None: it can)."""
        if not (math.isfinite(self.runtime_s) and self.runtime_s > 0):
            return "runtime_s must be a positive number"
        if len(self.load_seconds) != self.BINS:
            return f"load_seconds must have {self.BINS} bins, not {len(self.load_seconds)}"
        if not all(math.isfinite(x) and x >= 0 for x in self.load_seconds):
            return "load_seconds must be non-negative numbers"
        if sum(self.load_seconds) <= 0:
            return "load_seconds must cover some time"
        pressure = self.cpu_pressure
        if pressure is not None and not (math.isfinite(pressure) and 0 <= pressure <= 1):
            return "cpu_pressure must be a fraction in [0, 1]"
        return None


@dataclass(slots=True)
class PlacementState:
    """The agent's view of one placement it runs or ran."""

    placement_id: str
    workload_id: str
    state: str  # Running | Succeeded | Failed | Cancelled
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    # How often the agent restarted the process locally (restart_policy); the state stays
    # Running while it restarts. Defaulted so that reports from older agents still parse.
    restarts: int = 0
    # Only on a Succeeded state (Failed or Cancelled runs say nothing about slowdown); None when
    # the agent did not see the whole final run. Defaulted so that older agents' reports parse.
    observation: RuntimeObservation | None = None
    # A stable cause of the state beside the free-text message: ``NodeShutdown`` on a Failed state
    # the agent ended because it was itself shutting down ("" when none). Defaulted, as above.
    reason: str = ""


# PlacementState.reason of a placement its agent stopped while shutting down (not a hub stop).
NODE_SHUTDOWN = "NodeShutdown"


@dataclass(slots=True)
class RunSpec:
    """What an agent needs to run one placement.

    ``restart_policy`` (``never`` | ``on-failure`` | ``always``) and ``max_restarts`` tell the agent
    when to restart the process itself (see ``edge_agent.restarts``); ``offer`` is the replica as
    the local policy sees it (the same offer the hub's bid round sends), for those restart
    decisions. All three have defaults, so run commands from older hubs still parse.
    """

    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cpu: float = 0.1
    memory: int = 64 * 2**20
    gpu_indices: list[int] = field(default_factory=list)
    mig: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    restart_policy: str = "never"
    max_restarts: int = 5
    offer: OfferSpec | None = None
    # Bytes the work dir may hold; over it the agent kills the placement (Failed,
    # ``ephemeral_storage_exceeded``). Run commands from older hubs get the default limit.
    ephemeral_storage: int = DEFAULT_EPHEMERAL_STORAGE


@dataclass(slots=True)
class FunctionCode:
    """One immutable version of a function, as an agent needs it to start instances."""

    name: str
    version: int
    runtime: str  # python | command
    handler: str = ""
    source: str = ""
    path: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    memory: int = 128 * 2**20
    cpu: float = 0.1
    timeout_s: float = 30.0
    max_concurrency: int = 1
    # Bytes an instance's work dir may hold; over it the agent stops the instance.
    ephemeral_storage: int = DEFAULT_EPHEMERAL_STORAGE


@dataclass(slots=True)
class FunctionInstance:
    """An agent's report of one function instance (a long-lived worker process)."""

    instance_id: str
    function: str
    version: int
    state: str  # starting | idle | busy
    in_flight: int = 0
    max_concurrency: int = 1
    memory: int = 0
    started_at: float = 0.0
    last_used_at: float = 0.0
    cold_start_ms: float = 0.0
    keep_alive_s: float = 600.0


# --- messages -------------------------------------------------------------------------------


@dataclass(slots=True)
class RegisterV1:
    TYPE: ClassVar[str] = "register"
    node: str
    cluster: str
    boot_id: str
    agent_version: str
    resources: NodeResources
    heartbeat_interval_s: float
    labels: dict[str, str] = field(default_factory=dict)
    node_type: str = "edge"
    telemetry: Telemetry | None = None
    placements: list[PlacementState] = field(default_factory=list)
    # What the agent enforces on user code (edge_agent/confinement.py), e.g. {"run_as": ...};
    # empty from agents older than the field.
    isolation: dict[str, str] = field(default_factory=dict)
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class RegisterAckV1:
    TYPE: ClassVar[str] = "register_ack"
    accepted: bool
    reason: str = ""
    hub_id: str = ""
    # The placements the hub wants on this node now (None from hubs older than the field): a
    # restarted agent resumes only these, so that nothing the hub has moved runs twice.
    keep: list[str] | None = None
    # Not accepted yet, not refused either: the hub is admitting a storm of registrations at a
    # bounded rate and gives this one a later turn; ask again after about this many seconds (an
    # agent adds jitter). None from hubs older than the field, and on every other answer.
    retry_after_s: float | None = None
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class HeartbeatV1:
    TYPE: ClassVar[str] = "heartbeat"
    node: str
    boot_id: str
    seq: int
    sent_at: float
    telemetry: Telemetry
    running: list[str] = field(default_factory=list)  # placement ids running now
    instances: list[FunctionInstance] = field(default_factory=list)
    # The local policy version it decides with (None: the model it shipped with), and the mean
    # regret of its decisions audited since the last heartbeat (None: none were).
    policy_version: int | None = None
    policy_regret: float | None = None
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class CommandV1:
    TYPE: ClassVar[str] = "command"
    command_id: str
    kind: str  # run | stop
    placement_id: str
    workload_id: str
    spec: RunSpec | None = None
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class CommandAckV1:
    TYPE: ClassVar[str] = "command_ack"
    command_id: str
    accepted: bool
    duplicate: bool = False
    reason: str = ""
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class StatusReportV1:
    TYPE: ClassVar[str] = "status_report"
    report_id: str
    node: str
    placement: PlacementState
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class ReportAckV1:
    TYPE: ClassVar[str] = "report_ack"
    report_id: str
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class InvokeV1:
    """Run one invocation; the agent uses a warm instance or starts one (a cold start)."""

    TYPE: ClassVar[str] = "invoke"
    invocation_id: str
    code: FunctionCode
    event: Any = None
    keep_alive_s: float = 600.0
    allow_cold: bool = True  # False: wait for a busy instance rather than start one
    sent_at: float = 0.0
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class InvokeResultV1:
    TYPE: ClassVar[str] = "invoke_result"
    invocation_id: str
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None  # {"type", "message", "traceback"?, "code"}
    cold_start: bool = False
    cold_start_ms: float = 0.0
    queue_ms: float = 0.0
    exec_ms: float = 0.0
    instance_id: str = ""
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class PrewarmV1:
    """Start instances ahead of predicted arrivals: so that ``count`` exist (no-op if they do),
    or, with ``spare``, one more unless one is idle with room (a spare for an arrival predicted
    to overlap the calls in flight; an agent that predates the field ignores it and, with
    ``count`` 1, starts none beside a running instance)."""

    TYPE: ClassVar[str] = "prewarm"
    request_id: str
    code: FunctionCode
    count: int = 1
    keep_alive_s: float = 600.0
    spare: bool = False
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class RetireV1:
    """A deleted function: stop its idle instances now and the busy ones when they finish."""

    TYPE: ClassVar[str] = "retire"
    request_id: str
    function: str
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class RetireAckV1:
    TYPE: ClassVar[str] = "retire_ack"
    request_id: str
    stopped: int = 0
    draining: int = 0
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class PrewarmAckV1:
    TYPE: ClassVar[str] = "prewarm_ack"
    request_id: str
    started: int
    reason: str = ""
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class InvocationQueryV1:
    """A restarted hub asks a node what became of invocations it had in flight."""

    TYPE: ClassVar[str] = "invocation_query"
    query_id: str
    invocation_ids: list[str]
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class InvocationStatusV1:
    """What a node knows of the queried invocations: the finished ones with their results, the
    ones still running, and ``deferred`` ones whose results did not fit in this reply (ask again).
    Ids it does not know are in none of the lists."""

    TYPE: ClassVar[str] = "invocation_status"
    query_id: str
    finished: list[InvokeResultV1] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class OfferSpec:
    """The work a bid is asked for: one replica's request as the node's policy sees it."""

    cpu: float
    memory: int
    gpu: int = 0
    mig: list[str] = field(default_factory=list)
    dpu: int = 0
    kind: str = "batch"
    sla_s: float | None = None
    runtime_s: float | None = None
    priority: int = 0


@dataclass(slots=True)
class BidRequestV1:
    """The hub asks a candidate node's local policy what it would do with an offer."""

    TYPE: ClassVar[str] = "bid_request"
    request_id: str
    workload_id: str
    replica: int
    offer: OfferSpec
    deadline_ms: float = 50.0
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class BidV1:
    """A node's answer: decline (offload) or the resource bin it would run the offer with.

    ``score`` is the expected reward of that choice under the node's own weights, on the same
    scale as the hub's reward estimate, so bids and fallbacks compare. ``score_requested`` is the
    expected reward of running the offer exactly as requested (1x CPU, 1x memory, the requested
    accelerator), the quotas the hub places with; the hub ranks accepting bids by it when
    present (older agents omit it: then ``score``).
    """

    TYPE: ClassVar[str] = "bid"
    request_id: str
    node: str
    accept: bool
    action: int = -1
    cpu: float = 0.0
    memory: int = 0
    gpu_units: float = 0.0
    accelerator: str = "none"
    score: float = 0.0
    weights: list[float] = field(default_factory=list)
    source: str = ""
    masked: int = 0
    latency_us: float = 0.0
    score_requested: float | None = None
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class HubHelloV1:
    TYPE: ClassVar[str] = "hub_hello"
    hub_id: str
    started_at: float
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class PolicyV1:
    """Hub -> agent (request on ``node.<n>.policy``): run policy ``version``, whose files have
    these checksums and sizes, signed by the hub's key (:mod:`edgeplane_contract.policy.signing`);
    ``version`` None: go back to the shipped model (nothing to fetch or sign). A message may carry
    one chunk of a file (``part`` "model" or "metadata", base64 ``data`` at byte ``offset``): the
    agent answers what it needs next, so that a transfer resumes where it broke off."""

    TYPE: ClassVar[str] = "policy"
    version: int | None
    model_sha256: str = ""
    model_size: int = 0
    metadata_sha256: str = ""
    metadata_size: int = 0
    signature: str = ""
    part: str = ""
    offset: int = 0
    data: str = ""
    v: int = SCHEMA_VERSION


@dataclass(slots=True)
class PolicyAckV1:
    """Agent -> hub: ``state`` "running" (it decides with ``version`` now), "need" (send ``part``
    from ``offset``) or "refused" (``reason``: bad signature, checksum, or a model that does not
    load here; the hub does not send it again until the version changes)."""

    TYPE: ClassVar[str] = "policy_ack"
    version: int | None
    state: str
    part: str = ""
    offset: int = 0
    reason: str = ""
    v: int = SCHEMA_VERSION


# --- codec ----------------------------------------------------------------------------------
