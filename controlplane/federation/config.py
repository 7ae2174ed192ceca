"""The federation config file (``deploy/federation.yaml``): parsing and validation.

Schema (version 1)::

    version: 1
    default_cluster: edge-a            # optional; the first cluster otherwise
    clusters:
      - name: edge-a                   # [A-Za-z0-9_-]{1,63}, unique
        region: eu-west                # required
        nats_url: null                 # null/absent: the hub's own NATS connection
        subject_prefix: edgeplane.v1   # optional, default edgeplane.v1
        capacity_source: agents        # agents (live heartbeats) | static
        capacity: {cpu: 64, memory: 256Gi, gpu: 0}   # only for capacity_source: static
        cost_per_core_hour: 0.04       # >= 0
        carbon_g_per_kwh: 300          # >= 0, grid carbon intensity
        energy_price_per_kwh: 0.20     # >= 0
        weight: 1.0                    # > 0, used by placement.divide: weights
        labels: {tier: edge}
        partition_share: 0.55          # (0, 1]: this share of a cluster's nodes (3 or more) silent
                                       # at once is a partition: their work is held, not re-placed
        autonomy_window_s: 300         # >= 0: how long held work may stay with silent nodes
        eviction_grace_s: 30           # >= 0: how long the work of one silent node is held before
                                       # it is placed again (0: at once, when its lease expires)
    latency_ms:                        # symmetric inter-region latency matrix (ms)
      eu-west: {us-east: 80}
    placement:
      divide: capacity                 # capacity | weights
      spread_min_regions: 1            # replicas must span at least this many regions
      failover: true                   # re-place work of an unavailable cluster elsewhere
      failover_after_s: 30             # how long all of a cluster's leases must be expired
      latency_weight: 1.0              # >= 0, cluster ranking: inter-region latency to the data
      cost_weight: 0.5                 # >= 0, cluster ranking: cost_per_core_hour
      carbon_weight: 0.5               # >= 0, cluster ranking: carbon_g_per_kwh

Every error names the file, the key (a dotted path) and the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edgeplane_contract.messages import DEFAULT_PREFIX
from edgeplane_contract.resources import parse_cpu, parse_memory

from controlplane.errors import ConfigError

__all__ = [
    "ClusterConfig",
    "FederationConfig",
    "PlacementPolicy",
    "load_federation",
    "parse_federation",
    "single_cluster",
]

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
SUBJECT_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


@dataclass(slots=True)
class ClusterConfig:
    name: str
    region: str
    nats_url: str | None = None
    subject_prefix: str = DEFAULT_PREFIX
    capacity_source: str = "agents"
    static_capacity: dict[str, float] = field(default_factory=dict)
    cost_per_core_hour: float = 0.0
    carbon_g_per_kwh: float = 0.0
    energy_price_per_kwh: float = 0.0
    weight: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)
    # When this share of the cluster's nodes (3 or more) goes silent at once, the hub treats it as a
    # partition (as Kubernetes' zone-disruption rule does): the nodes go NotReady, but their work is
    # held for autonomy_window_s (the nodes keep serving locally) before it is placed again.
    partition_share: float = 0.55
    autonomy_window_s: float = 300.0
    # A single silent node's work is held this long beyond its lease before it is placed again
    # (Kubernetes' not-ready toleration): a node back within it keeps its work and reports what
    # finished meanwhile, instead of that work running twice. 0: placed again at lease expiry.
    # 30 s by default: an agent that restarts re-registers within it (and its registration confirms
    # what died with it, which is placed again at once); only a node that stays silent waits.
    eviction_grace_s: float = 30.0


@dataclass(slots=True)
class PlacementPolicy:
    divide: str = "capacity"
    spread_min_regions: int = 1
    failover: bool = True
    failover_after_s: float = 30.0
    # How clusters are ranked for a workload (see controlplane/federation/placement.py): each
    # factor is min-max normalised over the eligible clusters, then weighted.
    latency_weight: float = 1.0
    cost_weight: float = 0.5
    carbon_weight: float = 0.5


@dataclass(slots=True)
class FederationConfig:
    clusters: list[ClusterConfig]
    default_cluster: str
    latency_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    source: str = "<defaults>"

    def cluster(self, name: str) -> ClusterConfig | None:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        return None

    @property
    def regions(self) -> list[str]:
        return sorted({c.region for c in self.clusters})

    def latency_between(self, region_a: str, region_b: str) -> float:
        """Latency in ms between two regions (0 within a region; symmetric)."""
        if region_a == region_b:
            return 0.0
        return self.latency_ms.get((region_a, region_b), self.latency_ms.get((region_b, region_a), 100.0))


def single_cluster(name: str = "default", region: str = "local") -> FederationConfig:
    """The embedded default: one cluster on the hub's own NATS."""
    return FederationConfig(clusters=[ClusterConfig(name=name, region=region)], default_cluster=name)


def load_federation(path: str | Path) -> FederationConfig:
    """Read and validate a federation file; raises ConfigError naming file, key and reason."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, "<file>", f"cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        raise ConfigError(source, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_federation(data, source=source)


class _Reader:
    """Typed accessors that raise ConfigError with the dotted key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, reason: str) -> ConfigError:
        return ConfigError(self.source, key, reason)

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, got {type(value).__name__}")
        return value

    def string(self, value: Any, key: str, *, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string")
        if pattern is not None and not pattern.match(value):
            raise self.fail(key, f"{value!r} does not match {pattern.pattern}")
        return value

    def number(self, value: Any, key: str, *, minimum: float = 0.0, strict: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, "must be a number")
        if value < minimum or (strict and value == minimum):
            raise self.fail(key, f"must be {'>' if strict else '>='} {minimum}")
        return float(value)

    def unknown(self, mapping: dict[str, Any], allowed: set[str], key: str) -> None:
        for name in mapping:
            if name not in allowed:
                prefix = f"{key}." if key else ""
                raise self.fail(f"{prefix}{name}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


_CLUSTER_KEYS = {
    "name",
    "region",
    "nats_url",
    "subject_prefix",
    "capacity_source",
    "capacity",
    "cost_per_core_hour",
    "carbon_g_per_kwh",
    "energy_price_per_kwh",
    "weight",
    "labels",
    "partition_share",
    "autonomy_window_s",
    "eviction_grace_s",
}


def parse_federation(data: Any, *, source: str = "<federation>") -> FederationConfig:
    """Validate an already-parsed federation document."""
    r = _Reader(source)
    root = r.mapping(data, "<root>")
    r.unknown(root, {"version", "default_cluster", "clusters", "latency_ms", "placement"}, "")
    version = root.get("version", 1)
    if version != 1:
        raise r.fail("version", f"unsupported version {version!r} (supported: 1)")
    raw_clusters = root.get("clusters")
    if not isinstance(raw_clusters, list) or not raw_clusters:
        raise r.fail("clusters", "must be a non-empty list of clusters")
    clusters: list[ClusterConfig] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_clusters):
        key = f"clusters[{index}]"
        item = r.mapping(raw, key)
        r.unknown(item, _CLUSTER_KEYS, key)
        if "name" not in item:
            raise r.fail(f"{key}.name", "is required")
        name = r.string(item["name"], f"{key}.name", pattern=NAME_RE)
        if name in seen:
            raise r.fail(f"{key}.name", f"duplicate cluster name {name!r}")
        seen.add(name)
        if "region" not in item:
            raise r.fail(f"{key}.region", "is required")
        cluster = ClusterConfig(name=name, region=r.string(item["region"], f"{key}.region", pattern=NAME_RE))
        if item.get("nats_url") is not None:
            url = r.string(item["nats_url"], f"{key}.nats_url")
            if not re.match(r"^(nats|tls|ws|wss)://", url):
                raise r.fail(f"{key}.nats_url", f"{url!r} is not a nats:// (or tls://, ws://) URL")
            cluster.nats_url = url
        if "subject_prefix" in item:
            cluster.subject_prefix = r.string(
                item["subject_prefix"], f"{key}.subject_prefix", pattern=SUBJECT_PREFIX_RE
            )
        source_kind = item.get("capacity_source", "agents")
        if source_kind not in ("agents", "static"):
            raise r.fail(f"{key}.capacity_source", f"must be 'agents' or 'static', got {source_kind!r}")
        cluster.capacity_source = source_kind
        if "capacity" in item:
            cap = r.mapping(item["capacity"], f"{key}.capacity")
            r.unknown(cap, {"cpu", "memory", "gpu"}, f"{key}.capacity")
            try:
                cluster.static_capacity = {
                    "cpu": parse_cpu(cap.get("cpu", 0.001), field_name=f"{key}.capacity.cpu"),
                    "memory": float(parse_memory(cap.get("memory", 1), field_name=f"{key}.capacity.memory")),
                    "gpu": r.number(cap.get("gpu", 0), f"{key}.capacity.gpu"),
                }
            except ConfigError:
                raise
            except Exception as exc:
                raise r.fail(getattr(exc, "field", None) or f"{key}.capacity", str(exc)) from None
        elif source_kind == "static":
            raise r.fail(f"{key}.capacity", "is required when capacity_source is 'static'")
        for num_key in ("cost_per_core_hour", "carbon_g_per_kwh", "energy_price_per_kwh"):
            if num_key in item:
                setattr(cluster, num_key, r.number(item[num_key], f"{key}.{num_key}"))
        if "weight" in item:
            cluster.weight = r.number(item["weight"], f"{key}.weight", strict=True)
        if "partition_share" in item:
            share = r.number(item["partition_share"], f"{key}.partition_share", strict=True)
            if share > 1:
                raise r.fail(f"{key}.partition_share", "must be in (0, 1]")
            cluster.partition_share = share
        if "autonomy_window_s" in item:
            cluster.autonomy_window_s = r.number(item["autonomy_window_s"], f"{key}.autonomy_window_s")
        if "eviction_grace_s" in item:
            cluster.eviction_grace_s = r.number(item["eviction_grace_s"], f"{key}.eviction_grace_s")
        if "labels" in item:
            labels = r.mapping(item["labels"], f"{key}.labels")
            cluster.labels = {str(k): str(v) for k, v in labels.items()}
        clusters.append(cluster)

    default = root.get("default_cluster", clusters[0].name)
    if default not in seen:
        raise r.fail("default_cluster", f"{default!r} is not one of the clusters ({', '.join(sorted(seen))})")

    regions = {c.region for c in clusters}
    latency: dict[tuple[str, str], float] = {}
    if "latency_ms" in root:
        matrix = r.mapping(root["latency_ms"], "latency_ms")
        for region_a, row in matrix.items():
            if region_a not in regions:
                raise r.fail(
                    f"latency_ms.{region_a}", f"unknown region (known: {', '.join(sorted(regions))})"
                )
            for region_b, value in r.mapping(row, f"latency_ms.{region_a}").items():
                if region_b not in regions:
                    raise r.fail(
                        f"latency_ms.{region_a}.{region_b}",
                        f"unknown region (known: {', '.join(sorted(regions))})",
                    )
                latency[(region_a, region_b)] = r.number(value, f"latency_ms.{region_a}.{region_b}")

    policy = PlacementPolicy()
    if "placement" in root:
        raw_policy = r.mapping(root["placement"], "placement")
        r.unknown(
            raw_policy,
            {
                "divide",
                "spread_min_regions",
                "failover",
                "failover_after_s",
                "latency_weight",
                "cost_weight",
                "carbon_weight",
            },
            "placement",
        )
        divide = raw_policy.get("divide", "capacity")
        if divide not in ("capacity", "weights"):
            raise r.fail("placement.divide", f"must be 'capacity' or 'weights', got {divide!r}")
        policy.divide = divide
        if "spread_min_regions" in raw_policy:
            spread = raw_policy["spread_min_regions"]
            if isinstance(spread, bool) or not isinstance(spread, int) or spread < 1:
                raise r.fail("placement.spread_min_regions", "must be an integer >= 1")
            if spread > len(regions):
                raise r.fail(
                    "placement.spread_min_regions",
                    f"asks for {spread} regions but the federation has only {len(regions)}",
                )
            policy.spread_min_regions = spread
        if "failover" in raw_policy:
            if not isinstance(raw_policy["failover"], bool):
                raise r.fail("placement.failover", "must be true or false")
            policy.failover = raw_policy["failover"]
        if "failover_after_s" in raw_policy:
            policy.failover_after_s = r.number(raw_policy["failover_after_s"], "placement.failover_after_s")
        for weight_key in ("latency_weight", "cost_weight", "carbon_weight"):
            if weight_key in raw_policy:
                setattr(policy, weight_key, r.number(raw_policy[weight_key], f"placement.{weight_key}"))

    return FederationConfig(
        clusters=clusters, default_cluster=default, latency_ms=latency, placement=policy, source=source
    )
