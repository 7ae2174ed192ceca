"""Agent settings: from an optional YAML file, overridden by command-line flags.

File keys (all optional except where the CLI does not give them)::

    nats_url: nats://127.0.0.1:4222
    cluster: default
    name: edge-1
    subject_prefix: edgeplane.v1
    heartbeat_interval_s: 2.0
    node_type: edge            # edge | cpu | gpu | dpu
    labels: {zone: a}
    capacity: {cpu: 4, memory: 8Gi, dpu: 0}   # defaults: what the machine has
    power_supply_path: /sys/class/power_supply
    powercap_path: /sys/class/powercap   # RAPL energy counters (node power; else the power model)
    work_dir: ~/.edgeplane/agent/<name>
    sandbox_root: ""           # units' work dirs (default: work_dir + .sandboxes, or /var/lib/edgeplane/...)
    stop_grace_s: 5
    outbox_limit: 10000
    function_memory: 4Gi       # memory for function instances (default: half the node's)
    reward:                    # objective weights of the local policy; w3 rises on battery
      weights: {w1: 1.0, w2: 2.0, w3: 1.0, w4: 4.0}
      adaptive: {enabled: true, battery_multiplier: 4.0, low_battery_gain: 3.0}
    restart_backoff_s: 1       # first wait before a local restart; doubles per restart
    restart_backoff_max_s: 60  # ... up to this
    offline_scale_interval_s: 10  # without NATS: how often idle function instances are re-decided
    resume_confirm_s: 5        # after a restart: how long to wait for the hub to say which work to resume
    autonomy_window_s: 300     # ... without its word, resume only if the hub was heard this recently
    cpu_limits: true           # CPU quotas through cgroups (v1 if writable, v2 under cgroup_root)
    cgroup_root: ""            # a cgroup v2 directory delegated to the agent (Delegate=yes)
    run_as: edgeplane-run      # user code runs as this user when the agent is root ("" or agent: as root)
    pids_max: 512              # processes per workload or function instance (cgroup pids controller)
    unit_spawner: true         # placements forked by a small process of the agent's (false: by the agent)
    metrics_listen: 127.0.0.1:9101  # serve Prometheus /metrics here (default: off; PORT alone: loopback)
    log_max_bytes: 16Mi        # a log over this keeps its newest half (workloads' output, functions' stderr)
    log_retention_s: 604800    # logs of ended work are deleted this long after their last write

Errors name the file, the key and the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edgeplane_contract.credentials import NatsTls
from edgeplane_contract.errors import ConfigError, ValidationError
from edgeplane_contract.messages import DEFAULT_PREFIX
from edgeplane_contract.objective import RewardConfig
from edgeplane_contract.resources import parse_cpu, parse_memory

__all__ = ["AgentConfig", "load_agent_config", "parse_listen"]

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_USER = re.compile(r"^([a-z_][a-z0-9_.-]{0,31}|[0-9]{1,10})$")  # a POSIX user name or a uid
NODE_TYPES = ("edge", "cpu", "gpu", "dpu")


@dataclass(slots=True)
class AgentConfig:
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "default"
    name: str = ""
    subject_prefix: str = DEFAULT_PREFIX
    heartbeat_interval_s: float = 2.0
    node_type: str = "edge"
    labels: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None
    memory: int | None = None
    dpu: int = 0
    power_supply_path: str = "/sys/class/power_supply"
    powercap_path: str = "/sys/class/powercap"
    work_dir: str = ""
    # Where units' work dirs go ("": <work_dir>.sandboxes where the run user can reach it, else
    # /var/lib/edgeplane/sandboxes/<node>; as the agent's own user, <work_dir>/sandboxes).
    # Never inside work_dir: that one is private to the agent (edge_agent/confinement.py).
    sandbox_root: str = ""
    stop_grace_s: float = 5.0
    outbox_limit: int = 10000
    function_memory: int | None = None  # memory for function instances; default half the node's
    reward: RewardConfig = field(default_factory=RewardConfig)  # weights + adaptive rule, parsed once
    local_policy: bool = True  # answer the hub's bids with the local policy
    policy_model: str | None = None  # default: the int8 model shipped in the package
    privacy_epsilon: float = 0.1  # Laplace noise on rewards that leave the node
    decision_log_limit: int = 10000
    restart_backoff_s: float = 1.0  # local restarts: 1 s, 2 s, 4 s, ... (edge_agent/restarts.py)
    restart_backoff_max_s: float = 60.0
    # While NATS is down, the local policy re-decides each idle function instance this often.
    offline_scale_interval_s: float = 10.0
    # A restarted agent resumes its restartable work only where the hub confirms it (its answer to
    # the registration); with no answer within resume_confirm_s, only if the hub was last heard
    # within autonomy_window_s (else the hub may well have moved the work: it would run twice).
    resume_confirm_s: float = 5.0
    autonomy_window_s: float = 300.0
    cpu_limits: bool = True  # enforce CPU quotas through cgroups where possible (edge_agent/cgroups.py)
    cgroup_root: str = ""  # a cgroup v2 directory delegated to the agent ("": cgroup v1 if writable)
    # User code runs as this user when the agent is root (edge_agent/confinement.py); "" or
    # "agent": as the agent's own user, an explicit opt-out.
    run_as: str = "edgeplane-run"
    pids_max: int = 512  # processes per workload or function instance, where a pids cgroup exists
    # Placements' processes are forked by a small process of the agent's (edge_agent/spawner.py),
    # not by the agent with its heap: a start costs a fraction of the CPU and latency. False: the
    # agent forks them itself (also what it does where the spawner cannot start).
    unit_spawner: bool = True
    metrics_listen: tuple[str, int] | None = None  # (host, port) of /metrics; None: not served
    log_max_bytes: int = 16 * 2**20  # edge_agent/logs.py
    log_retention_s: float = 7 * 86400.0
    # The node's NATS identity (edge_agent/enrol.py), set from its credentials, never from the file.
    nats_seed: str = field(default="", repr=False)
    inbox_prefix: str = ""
    nats_tls: NatsTls | None = None
    # The hub's nkey public key, which signs policy versions (from the credentials, else the
    # file's ``hub_public_key``); "": policy versions are refused (the shipped model stays).
    hub_public_key: str = ""


_KEYS = {
    "nats_url",
    "cluster",
    "name",
    "subject_prefix",
    "heartbeat_interval_s",
    "node_type",
    "labels",
    "capacity",
    "power_supply_path",
    "powercap_path",
    "work_dir",
    "sandbox_root",
    "stop_grace_s",
    "outbox_limit",
    "function_memory",
    "reward",
    "local_policy",
    "policy_model",
    "hub_public_key",
    "privacy_epsilon",
    "decision_log_limit",
    "restart_backoff_s",
    "restart_backoff_max_s",
    "offline_scale_interval_s",
    "resume_confirm_s",
    "autonomy_window_s",
    "cpu_limits",
    "cgroup_root",
    "run_as",
    "pids_max",
    "unit_spawner",
    "metrics_listen",
    "log_max_bytes",
    "log_retention_s",
}


def load_agent_config(path: str | None, overrides: dict[str, Any]) -> AgentConfig:
    """Merge the file (if any) and the non-None overrides, then validate everything."""
    source = path or "<command line>"
    data: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(source, "<file>", f"cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(source, "<file>", f"not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(source, "<root>", "must be a mapping")
        for key in loaded:
            if key not in _KEYS:
                raise ConfigError(source, str(key), f"unknown key (allowed: {', '.join(sorted(_KEYS))})")
        data.update(loaded)
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    return _validate(data, source)


def _validate(data: dict[str, Any], source: str) -> AgentConfig:
    cfg = AgentConfig()

    def fail(key: str, reason: str) -> ConfigError:
        return ConfigError(source, key, reason)

    if not data.get("name"):
        raise fail("name", "is required (--name, or name: in the config file)")
    for key in ("cluster", "name"):
        value = data.get(key, getattr(cfg, key))
        if not isinstance(value, str) or not _TOKEN.match(value):
            raise fail(key, f"must match [A-Za-z0-9_-]{{1,63}}, got {value!r}")
        setattr(cfg, key, value)
    url = data.get("nats_url", cfg.nats_url)
    if not isinstance(url, str) or not re.match(r"^(nats|tls|ws|wss)://", url):
        raise fail("nats_url", f"must be a nats:// URL, got {url!r}")
    cfg.nats_url = url
    prefix = data.get("subject_prefix", cfg.subject_prefix)
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise fail("subject_prefix", f"must be dot-separated tokens, got {prefix!r}")
    cfg.subject_prefix = prefix
    for key, low, high in (
        ("heartbeat_interval_s", 0.05, 60),  # what the hub accepts (controlplane/hub/registration.py)
        ("stop_grace_s", 0, 3600),
        ("restart_backoff_s", 0, 3600),
        ("restart_backoff_max_s", 0, 3600),
        ("offline_scale_interval_s", 0.05, 3600),
        ("resume_confirm_s", 0, 600),
        ("autonomy_window_s", 0, 7 * 86400),
        ("log_retention_s", 0, 365 * 86400),
    ):
        value = data.get(key, getattr(cfg, key))
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise fail(key, f"must be a number between {low} and {high}")
        setattr(cfg, key, float(value))
    if cfg.restart_backoff_max_s < cfg.restart_backoff_s:
        raise fail("restart_backoff_max_s", "must be >= restart_backoff_s")
    node_type = data.get("node_type", cfg.node_type)
    if node_type not in NODE_TYPES:
        raise fail("node_type", f"must be one of {', '.join(NODE_TYPES)}")
    cfg.node_type = node_type
    labels = data.get("labels", {})
    if not isinstance(labels, dict):
        raise fail("labels", "must be a mapping of string to string")
    cfg.labels = {str(k): str(v) for k, v in labels.items()}
    capacity = data.get("capacity", {})
    if not isinstance(capacity, dict):
        raise fail("capacity", "must be a mapping with cpu, memory, dpu")
    for key in capacity:
        if key not in ("cpu", "memory", "dpu"):
            raise fail(f"capacity.{key}", "unknown key (allowed: cpu, memory, dpu)")
    try:
        if capacity.get("cpu") is not None:
            cfg.cpu = parse_cpu(capacity["cpu"], field_name="capacity.cpu")
        if capacity.get("memory") is not None:
            cfg.memory = parse_memory(capacity["memory"], field_name="capacity.memory")
    except ValidationError as exc:
        raise fail(exc.field or "capacity", exc.message) from None
    dpu = capacity.get("dpu", 0)
    if isinstance(dpu, bool) or not isinstance(dpu, int) or dpu < 0:
        raise fail("capacity.dpu", "must be an integer >= 0")
    cfg.dpu = dpu
    for key in ("power_supply_path", "powercap_path", "work_dir"):
        value = data.get(key, getattr(cfg, key))
        if not isinstance(value, str):
            raise fail(key, "must be a path string")
        setattr(cfg, key, value)
    if not cfg.work_dir:
        cfg.work_dir = str(Path.home() / ".edgeplane" / "agent" / cfg.name)
    # Absolute once, here: processes started in a work dir of their own must not resolve a
    # relative path against it a second time (a relative --data-dir broke every function).
    cfg.work_dir = str(Path(cfg.work_dir).expanduser().absolute())
    sandbox_root = data.get("sandbox_root", "")
    if not isinstance(sandbox_root, str):
        raise fail("sandbox_root", "must be a path string")
    if sandbox_root:
        root = Path(sandbox_root).expanduser().absolute()
        if root == Path(cfg.work_dir) or Path(cfg.work_dir) in root.parents:
            raise fail("sandbox_root", "must not be inside work_dir (the agent's own files are private)")
        cfg.sandbox_root = str(root)
    if data.get("log_max_bytes") is not None:
        try:
            cfg.log_max_bytes = parse_memory(data["log_max_bytes"], field_name="log_max_bytes")
        except ValidationError as exc:
            raise fail("log_max_bytes", exc.message) from None
        if cfg.log_max_bytes < 64 * 1024:
            raise fail("log_max_bytes", "must be at least 64Ki")
    if data.get("function_memory") is not None:
        try:
            cfg.function_memory = parse_memory(data["function_memory"], field_name="function_memory")
        except ValidationError as exc:
            raise fail("function_memory", exc.message) from None
    reward = data.get("reward", {})
    if not isinstance(reward, dict):
        raise fail("reward", "must be a mapping with weights and adaptive")
    try:
        cfg.reward = RewardConfig.from_dict(reward)
    except (ValueError, TypeError) as exc:
        raise fail("reward", str(exc)) from None
    local_policy = data.get("local_policy", True)
    if not isinstance(local_policy, bool):
        raise fail("local_policy", "must be true or false")
    cfg.local_policy = local_policy
    cpu_limits = data.get("cpu_limits", True)
    if not isinstance(cpu_limits, bool):
        raise fail("cpu_limits", "must be true or false")
    cfg.cpu_limits = cpu_limits
    cgroup_root = data.get("cgroup_root", "")
    if not isinstance(cgroup_root, str) or (cgroup_root and not Path(cgroup_root).is_absolute()):
        raise fail("cgroup_root", "must be an absolute path to a delegated cgroup v2 directory")
    cfg.cgroup_root = cgroup_root
    run_as = data.get("run_as", cfg.run_as)
    if not isinstance(run_as, str) or (run_as and not _USER.match(run_as)):
        raise fail("run_as", f'must be a user name or uid, "" or "agent", got {run_as!r}')
    cfg.run_as = run_as
    pids_max = data.get("pids_max", cfg.pids_max)
    if isinstance(pids_max, bool) or not isinstance(pids_max, int) or not 16 <= pids_max <= 4_194_304:
        raise fail("pids_max", "must be an integer between 16 and 4194304")
    cfg.pids_max = pids_max
    unit_spawner = data.get("unit_spawner", True)
    if not isinstance(unit_spawner, bool):
        raise fail("unit_spawner", "must be true or false")
    cfg.unit_spawner = unit_spawner
    model = data.get("policy_model")
    if model is not None and not isinstance(model, str):
        raise fail("policy_model", "must be a path to an .onnx file")
    cfg.policy_model = model
    hub_key = data.get("hub_public_key", "")
    if not isinstance(hub_key, str) or (hub_key and (len(hub_key) != 56 or not hub_key.startswith("U"))):
        raise fail("hub_public_key", "must be the hub's nkey public key (U and 55 characters)")
    cfg.hub_public_key = hub_key
    epsilon = data.get("privacy_epsilon", cfg.privacy_epsilon)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0 < epsilon <= 100:
        raise fail("privacy_epsilon", "must be a number in (0, 100]")
    cfg.privacy_epsilon = float(epsilon)
    log_limit = data.get("decision_log_limit", cfg.decision_log_limit)
    if isinstance(log_limit, bool) or not isinstance(log_limit, int) or log_limit < 1:
        raise fail("decision_log_limit", "must be an integer >= 1")
    cfg.decision_log_limit = log_limit
    limit = data.get("outbox_limit", cfg.outbox_limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise fail("outbox_limit", "must be an integer >= 1")
    cfg.outbox_limit = limit
    listen = data.get("metrics_listen")
    if listen is not None and listen != "":
        try:
            cfg.metrics_listen = parse_listen(listen)
        except ValueError as exc:
            raise fail("metrics_listen", str(exc)) from None
    return cfg


def parse_listen(value: object) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` -> (host, port); no host is loopback
    (metrics say much about a node: exposed beyond it only when asked)."""
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be HOST:PORT or PORT with a port from 0 to 65535, got {text!r}")
    return host, int(port)
