"""Placement profiles: which plugins run, with which weights and args. Configuration, not code.

A profile is a mapping (or a YAML file holding one)::

    name: my-profile
    plugins:                       # order matters for filters and post-filters
      - name: NodeReady
      - name: NodeResourcesFit
      - name: NodeResourcesLeastAllocated
        weight: 1                  # score weight (default 1)
        args: {resources: {cpu: 1, memory: 1}}
      - name: DefaultPreemption
    action_space:
      cpu_bins: [1.0]              # CPU quota bins, multiples of the request
      memory_bins: [1.0]
      accelerator_policy: first_fit   # first_fit | best_fit
    percentage_of_nodes_to_score: 0   # 0: adaptive as kube-scheduler; 1-100: fixed share
    min_nodes_to_score: 100        # sampling never scores fewer feasible nodes (kube: 100)
    tie_break: random              # random (seeded, as kube) | first
    reward: {...}                  # edgeplane_contract/objective.py (used by MultiObjective)

A plugin takes part in every extension point it implements (like kube's ``multiPoint``).
Built-in profiles: ``default`` (kube-scheduler's default scoring), ``default-mostallocated``
(the same plugin set scoring MostAllocated, what an operator running a power manager configures),
``binpack`` (Volcano's binpack alone), ``volcano`` (Volcano as shipped: nodeorder plus binpack),
``edgeplane`` (the multi-objective reward, interference and the SLA-miss risk learned online),
``edgeplane-static`` (its interference prior never updated, no risk learned),
``edgeplane-no-risk`` (``edgeplane`` without the learned SLA-miss risk), ``edgeplane-fixed``
(the same with the adaptive energy weight switched off, for battery comparisons),
``edgeplane-learned`` (``edgeplane`` with the
edge agents' int8 local policy bidding in place of the reward score, under the hub's SLA shield;
``edgeplane-learned-unshielded`` without it) and ``edgeplane-merge``
(``edgeplane`` with GpuFragmentation's fragment merge on, as it was before issue 13).
:data:`FUNCTION_PROFILE` filters nodes for function instances (the function router scores them);
it places no workload, so it is not among the profiles ``--scheduler`` takes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edgeplane_contract.objective import RewardConfig

from controlplane.errors import ConfigError
from controlplane.scheduling.actions import ACCELERATOR_POLICIES, ActionSpaceConfig
from controlplane.scheduling.plugins.registry import REGISTRY, VALIDATORS
from controlplane.scheduling.shield import DEFAULT_BID_SHIELD_MARGIN

__all__ = ["BUILTIN_PROFILES", "FUNCTION_PROFILE", "PluginSpec", "Profile", "load_profile", "parse_profile"]

_UPSTREAM_DEFAULT: dict[str, Any] = {
    "name": "default",
    # kube-scheduler's default plugin set, restricted to what applies here, with upstream's
    # score weights (pkg/scheduler/apis/config/v1/default_plugins.go): NodeAffinity 2,
    # PodTopologySpread 2, NodeResourcesFit (LeastAllocated) 1, BalancedAllocation 1.
    # TaintToleration, InterPodAffinity and ImageLocality score every node alike here (no
    # taints, no pod affinity terms, no images) and are left out.
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeAffinity", "weight": 2},
        {"name": "PodTopologySpread", "weight": 2},
        {"name": "NodeResourcesLeastAllocated", "weight": 1},
        {"name": "NodeResourcesBalancedAllocation", "weight": 1},
        {"name": "DefaultPreemption"},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"accelerator_policy": "first_fit"},
    "percentage_of_nodes_to_score": 0,
    "tie_break": "random",
}

_VOLCANO_BINPACK: dict[str, Any] = {
    "name": "binpack",
    # Volcano with the binpack plugin (upstream default weights: binpack.weight 1, cpu 1,
    # memory 1) after its predicates; nodeorder's least-requested scoring is off, as Volcano's
    # binpack guide recommends. Volcano's default actions (enqueue, allocate, backfill) do not
    # preempt, so there is no preemption here.
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeAffinity", "weight": 1},
        {"name": "VolcanoBinpack", "weight": 1},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"accelerator_policy": "first_fit"},
    "percentage_of_nodes_to_score": 100,
    "tie_break": "random",
}


def _replacing(
    base: dict[str, Any], name: str, plugin: str, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """A copy of ``base`` named ``name`` whose ``plugin`` entry is ``change(entry)`` (the
    other plugins, the action space and the reward stay as they are)."""
    out = copy.deepcopy(base)
    out["name"] = name
    out["plugins"] = [change(p) if p["name"] == plugin else p for p in out["plugins"]]
    return out


def _most_allocated(base: dict[str, Any], name: str) -> dict[str, Any]:
    """``base`` with NodeResourcesFit's LeastAllocated score swapped for MostAllocated (same weight)."""
    return _replacing(
        base, name, "NodeResourcesLeastAllocated", lambda p: {**p, "name": "NodeResourcesMostAllocated"}
    )


_VOLCANO: dict[str, Any] = {
    "name": "volcano",
    # Volcano as shipped (installer/helm/chart/volcano/config/volcano-scheduler.conf): actions
    # "enqueue, allocate, backfill"; tiers [priority, gang, conformance], [overcommit, drf,
    # predicates, proportion, nodeorder, binpack], all at their default arguments.
    # What maps: predicates -> NodeReady, NodeResourcesFit (and NodeAffinity's filter);
    # nodeorder's scores at its defaults (pkg/scheduler/plugins/nodeorder calculateWeight):
    # leastrequested 1 (cpu:memory 50:50, the same ratio as 1:1), balancedresource 1,
    # nodeaffinity 2, podtopologyspread 2 (system-default constraints); binpack at binpack.weight
    # 1 (cpu 1, memory 1). Volcano adds the plugins' 0-100 scores times their weights, as this
    # framework does. priority and gang are the scheduler core's queue order (priority, then
    # arrival) and all-or-nothing gangs, the same for every profile. No preemption: the default
    # actions have neither preempt nor reclaim.
    # What does not: podaffinity (2), tainttoleration (3) and imagelocality (1) score every node
    # alike here (no affinity terms, taints or images); balancedresource's nvidia.com/gpu term
    # (upstream skips it for pods that request no GPU; only whole-GPU tasks would see it); drf,
    # proportion and conformance (one queue, one tenant, no critical pods); overcommit and the
    # enqueue gate (admission of whole jobs against 1.2x capacity: here work waits in the queue
    # instead); newer releases' reserve action and reservation plugin.
    # Note: at these weights binpack and leastrequested are complements resource by resource
    # (their sum is 100 on every node, up to rounding), so Volcano as shipped does not pack.
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeAffinity", "weight": 2},
        {"name": "PodTopologySpread", "weight": 2},
        {"name": "NodeResourcesLeastAllocated", "weight": 1},
        {"name": "NodeResourcesBalancedAllocation", "weight": 1},
        {"name": "VolcanoBinpack", "weight": 1},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"accelerator_policy": "first_fit"},
    # Volcano's allocate scores every feasible node (no kube-style sampling).
    "percentage_of_nodes_to_score": 100,
    "tie_break": "random",
}

_EDGEPLANE: dict[str, Any] = {
    "name": "edgeplane",
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeAffinity", "weight": 1},
        {"name": "MultiObjective", "weight": 4},
        # No fragment merge: a move restarts the moved replica and, without checkpoints, loses
        # its progress; on the mig-fragmentation preset the merge lowered large-GPU
        # schedulability and raised SLA violations (docs/bench-scheduling.md, issue 13), and on
        # seed-200 it never fires. "edgeplane-merge" keeps it on.
        {
            "name": "GpuFragmentation",
            "weight": 1,
            "args": {"accelerator_reserve": 1.0, "merge": False, "merge_kinds": ["batch", "analytics"]},
        },
        {"name": "PodTopologySpread", "weight": 0.5},
        {"name": "DefaultPreemption"},
        {"name": "DefaultBinder"},
    ],
    "action_space": {"accelerator_policy": "best_fit"},
    # kube's adaptive sampling, but never fewer than 1,000 feasible nodes scored: every node is
    # scored up to 1,000-node fleets (all published tables), a rotating window of 1,000 of them
    # beyond (10% of 5,000 would be 500; the reward ranks finer than kube's scores, so it gets
    # a larger window). bench/scheduler_latency.py measures what it saves.
    "percentage_of_nodes_to_score": 0,
    "min_nodes_to_score": 1000,
    "tie_break": "random",
    "reward": {
        "weights": {"util": 1.0, "qos": 2.0, "energy": 1.0, "penalty": 4.0},
        "adaptive": {"enabled": True, "battery_multiplier": 4.0, "low_battery_gain": 3.0},
        # A prior, not the simulator's figure: "edgeplane" learns knee and sensitivities online
        # from observed runtimes (controlplane/scheduling/interference.py, docs/scheduling.md).
        "knee": 0.80,
        "interference": "learned",
        # The chance of missing the SLA at each load, learned from outcomes with no model
        # (scheduling/sla_risk.py): the knee's mean slowdown stays inside an SLA that a tenth of
        # the replicas miss. 3 chosen on arrival seeds 301-303 (physics 7301-7303), held out
        # elsewhere (docs/bench-policy.md).
        "sla_risk_weight": 3.0,
        "sla_margin": 0.85,
        "slowdown_weight": 0.5,
        "battery_floor_percent": 15.0,
    },
}


def _merging(base: dict[str, Any], name: str) -> dict[str, Any]:
    """``base`` with GpuFragmentation's fragment merge on (moving only batch and analytics work:
    restarting a short inference job costs its SLA)."""
    return _replacing(
        base, name, "GpuFragmentation", lambda p: {**p, "args": {**p.get("args", {}), "merge": True}}
    )


def _variant(base: dict[str, Any], name: str, reward: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out["name"] = name
    out["reward"] = {**out.get("reward", {}), **reward}
    return out


def _learned(base: dict[str, Any], name: str, shield_margin: float | None) -> dict[str, Any]:
    """``base`` with its MultiObjective score replaced by the agents' local policy (same weight).

    Filters, post-filters, the other scores and the reward block stay; the reward block becomes
    the plugin's args (the agents' base weights and battery rule, and the fallback score);
    ``shield_margin``: the SLA shield over the bids (None: none; scheduling/shield.py).
    """
    shield = {} if shield_margin is None else {"shield_margin": shield_margin}
    return _replacing(
        base,
        name,
        "MultiObjective",
        lambda p: {
            "name": "LocalPolicyBid",
            "weight": p.get("weight", 1.0),
            "args": {"reward": copy.deepcopy(base["reward"]), **shield},
        },
    )


_FUNCTIONS: dict[str, Any] = {
    "name": "functions",
    # Function instances: the same filters as workloads (readiness, free capacity after the
    # workloads' reservations, affinity). No score: the cold-start-aware router prices the nodes
    # that pass (warm, queue or cold; serverless/router.py). No preemption: an instance that
    # does not fit waits for none; the invocation is answered no_capacity.
    "plugins": [
        {"name": "NodeReady"},
        {"name": "NodeResourcesFit"},
        {"name": "NodeAffinity", "weight": 1},
    ],
    "action_space": {"accelerator_policy": "first_fit"},
    "percentage_of_nodes_to_score": 100,
    "tie_break": "first",
}


BUILTIN_PROFILES: dict[str, dict[str, Any]] = {
    "default": _UPSTREAM_DEFAULT,
    # kube-scheduler as an operator configures it beside a power manager (scoringStrategy
    # MostAllocated), so that the consolidation the power manager needs is credited to a baseline.
    "default-mostallocated": _most_allocated(_UPSTREAM_DEFAULT, "default-mostallocated"),
    "binpack": _VOLCANO_BINPACK,
    "volcano": _VOLCANO,
    "edgeplane": _EDGEPLANE,
    "edgeplane-fixed": _variant(_EDGEPLANE, "edgeplane-fixed", {"adaptive": {"enabled": False}}),
    # The same prior never updated: what the learning buys.
    "edgeplane-static": _variant(
        _EDGEPLANE, "edgeplane-static", {"interference": "fixed", "sla_risk_weight": 0.0}
    ),
    "edgeplane-no-risk": _variant(_EDGEPLANE, "edgeplane-no-risk", {"sla_risk_weight": 0.0}),
    # The edge agents' int8 local policy deciding placement (controlplane/scheduling/plugins/
    # local_policy_bid.py): loads onnxruntime and the shipped model when it is loaded.
    # With the hub's SLA shield over the bids, as the live bid round applies it by default.
    "edgeplane-learned": _learned(_EDGEPLANE, "edgeplane-learned", DEFAULT_BID_SHIELD_MARGIN),
    "edgeplane-learned-unshielded": _learned(_EDGEPLANE, "edgeplane-learned-unshielded", None),
    # edgeplane as it was before issue 13's MIG measurement: the fragment merge on.
    "edgeplane-merge": _merging(_EDGEPLANE, "edgeplane-merge"),
}


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin of a profile: registry name, score weight, args."""

    name: str
    weight: float = 1.0
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Profile:
    """A validated profile."""

    name: str
    plugins: tuple[PluginSpec, ...]
    action_space: ActionSpaceConfig = field(default_factory=ActionSpaceConfig)
    percentage_of_nodes_to_score: int = 0
    min_nodes_to_score: int = 100
    tie_break: str = "random"
    reward: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<builtin>"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "plugins": [{"name": p.name, "weight": p.weight, "args": dict(p.args)} for p in self.plugins],
            "action_space": {
                "cpu_bins": list(self.action_space.cpu_bins),
                "memory_bins": list(self.action_space.memory_bins),
                "accelerator_policy": self.action_space.accelerator_policy,
            },
            "percentage_of_nodes_to_score": self.percentage_of_nodes_to_score,
            "min_nodes_to_score": self.min_nodes_to_score,
            "tie_break": self.tie_break,
            "reward": dict(self.reward),
        }


def load_profile(spec: str | Path | Mapping[str, Any]) -> Profile:
    """A built-in profile by name, a YAML file path, or a mapping."""
    if isinstance(spec, Mapping):
        return parse_profile(spec, source="<mapping>")
    text = str(spec)
    if text in BUILTIN_PROFILES:
        return parse_profile(BUILTIN_PROFILES[text], source=f"<builtin:{text}>")
    path = Path(text)
    if not path.exists():
        raise ConfigError(
            text,
            "<file>",
            f"no such profile file, and not a built-in profile ({', '.join(BUILTIN_PROFILES)})",
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(text, "<file>", f"cannot read profile: {exc}") from None
    return parse_profile(data, source=text)


def _number(value: Any, source: str, key: str, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ConfigError(source, key, f"must be a number >= {minimum}")
    return float(value)


def parse_profile(data: Any, *, source: str = "<profile>") -> Profile:
    """Validate a profile mapping; errors name the source, the key and the reason."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, "<root>", "a profile must be a mapping")
    allowed = {
        "name",
        "plugins",
        "action_space",
        "percentage_of_nodes_to_score",
        "min_nodes_to_score",
        "tie_break",
        "reward",
    }
    for key in data:
        if key not in allowed:
            raise ConfigError(source, str(key), f"unknown key (allowed: {', '.join(sorted(allowed))})")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(source, "name", "must be a non-empty string")
    raw_plugins = data.get("plugins")
    if not isinstance(raw_plugins, list) or not raw_plugins:
        raise ConfigError(source, "plugins", "must be a non-empty list")
    plugins: list[PluginSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(raw_plugins):
        key = f"plugins[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, Mapping):
            raise ConfigError(source, key, "must be a plugin name or a mapping with 'name'")
        extra = set(item) - {"name", "weight", "args"}
        if extra:
            raise ConfigError(
                source, f"{key}.{sorted(extra)[0]}", "unknown key (allowed: args, name, weight)"
            )
        pname = item.get("name")
        if pname not in REGISTRY:
            raise ConfigError(
                source, f"{key}.name", f"unknown plugin {pname!r} (known: {', '.join(sorted(REGISTRY))})"
            )
        if pname in seen:
            raise ConfigError(source, f"{key}.name", f"plugin {pname!r} listed twice")
        seen.add(pname)
        weight = _number(item.get("weight", 1.0), source, f"{key}.weight")
        args = item.get("args") or {}
        if not isinstance(args, Mapping):
            raise ConfigError(source, f"{key}.args", "must be a mapping")
        check = VALIDATORS.get(pname)
        if check is not None:
            try:
                check(args)
            except (TypeError, ValueError) as exc:
                raise ConfigError(source, f"{key}.args", str(exc)) from None
        plugins.append(PluginSpec(name=pname, weight=weight, args=dict(args)))
    space_raw = data.get("action_space") or {}
    if not isinstance(space_raw, Mapping):
        raise ConfigError(source, "action_space", "must be a mapping")
    extra = set(space_raw) - {"cpu_bins", "memory_bins", "accelerator_policy"}
    if extra:
        raise ConfigError(source, f"action_space.{sorted(extra)[0]}", "unknown key")
    bins: dict[str, tuple[float, ...]] = {}
    for bin_key in ("cpu_bins", "memory_bins"):
        values = space_raw.get(bin_key, [1.0])
        if not isinstance(values, list) or not values:
            raise ConfigError(source, f"action_space.{bin_key}", "must be a non-empty list of numbers")
        bins[bin_key] = tuple(_number(v, source, f"action_space.{bin_key}", minimum=0.01) for v in values)
    policy = space_raw.get("accelerator_policy", "first_fit")
    if policy not in ACCELERATOR_POLICIES:
        raise ConfigError(
            source, "action_space.accelerator_policy", f"must be one of {', '.join(ACCELERATOR_POLICIES)}"
        )
    pct = data.get("percentage_of_nodes_to_score", 0)
    if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
        raise ConfigError(source, "percentage_of_nodes_to_score", "must be an integer from 0 to 100")
    min_nodes = data.get("min_nodes_to_score", 100)
    if isinstance(min_nodes, bool) or not isinstance(min_nodes, int) or min_nodes < 1:
        raise ConfigError(source, "min_nodes_to_score", "must be an integer >= 1")
    tie = data.get("tie_break", "random")
    if tie not in ("random", "first"):
        raise ConfigError(source, "tie_break", "must be 'random' or 'first'")
    reward = data.get("reward") or {}
    if not isinstance(reward, Mapping):
        raise ConfigError(source, "reward", "must be a mapping")
    try:
        RewardConfig.from_dict(reward)
    except (TypeError, ValueError) as exc:
        raise ConfigError(source, "reward", str(exc)) from None
    return Profile(
        name=name,
        plugins=tuple(plugins),
        action_space=ActionSpaceConfig(bins["cpu_bins"], bins["memory_bins"], policy),
        percentage_of_nodes_to_score=pct,
        min_nodes_to_score=min_nodes,
        tie_break=tie,
        reward=dict(reward),
        source=source,
    )


FUNCTION_PROFILE = parse_profile(_FUNCTIONS, source="<builtin:functions>")
"""The filters function instances pass (``Scheduler.feasible_nodes``); the router scores them."""
