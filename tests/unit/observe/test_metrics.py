"""The metrics the hub and the agent export, the scheduler's timings, and the Grafana dashboard's
queries checked against what the code exports."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from edgeplane_contract.messages import FunctionInstance
from edgeplane_contract.objective import RewardConfig

from controlplane.fleet.energy import EnergyMeter
from controlplane.fleet.nodes import NodeLive
from controlplane.observe.hub import HubMetrics
from controlplane.observe.scheduler import SchedulerMetrics
from controlplane.scheduling.model import NodeState, ResourceRequest, WorkloadRequest
from controlplane.scheduling.scheduler import Scheduler
from edge_agent.config import load_agent_config, parse_listen
from edge_agent.metrics import AgentState, agent_registry
from edge_agent.telemetry.power import PowerState

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "edgeplane-dashboard.json"


# --- what the code exports ------------------------------------------------------------------


class _Bus:
    malformed = Counter({"heartbeat": 2})
    rejected: Counter[str] = Counter()

    def hearing_since(self, cluster: str) -> float | None:
        return 1.0

    def reconnects(self, cluster: str) -> int:
        return 3


class _Placer:
    def allocated(self, node: str) -> dict[str, object]:
        return {"cpu": 1.5, "memory": 2**30, "gpus": 1, "mig": [{"gpu": 0}]}

    def capacity(self, node: str) -> dict[str, object]:
        return {"cpu": 4.0, "memory": 8 * 2**30, "gpus": 2}


def _instance(function: str, state: str) -> FunctionInstance:
    return FunctionInstance(instance_id=f"{function}-{state}", function=function, version=1, state=state)


def hub_registry() -> CollectorRegistry:
    """A hub's registry over a fake hub with a battery node, a mains node and a warm instance."""
    metrics = HubMetrics()
    nodes = {
        "e1": NodeLive("e1", "default", "Ready", "b", 1.0, 0.0, telemetry={"weights": [1, 2, 4.5, 4]},
                       power_source="battery", battery_percent=40.0),
        "e2": NodeLive("e2", "default", "NotReady", "b", 1.0, 0.0),
    }  # fmt: skip
    hub = SimpleNamespace(
        nodes=nodes,
        bus=_Bus(),
        federation=SimpleNamespace(clusters=[SimpleNamespace(name="default")]),
        placer=_Placer(),
        functions=SimpleNamespace(
            instances={"e1": {"i": _instance("echo", "idle")}},
            counters=Counter({"prewarms": 2, "forecast_prewarms": 5}),
        ),
        energy=_energy(),
        cordoned={"e1"},
        descheduler=SimpleNamespace(moves=3, held_by_budget=1),
    )
    metrics.watch(hub)  # type: ignore[arg-type]
    return metrics.registry


def agent_state(on_battery: bool = True) -> AgentState:
    return AgentState(
        node="e1",
        cluster="default",
        counters=Counter({"heartbeats": 7, "invocations": 2}),
        function_counters={"cold_starts": 1, "warm_starts": 1},
        running=lambda: 1,
        instances=lambda: [_instance("echo", "idle"), _instance("echo", "busy")],
        outbox_depth=lambda: 0,
        hub_reachable=lambda: True,
        power=lambda: PowerState(source="battery" if on_battery else "mains", battery_percent=30.0),
        reward=RewardConfig,
    )


def exported(*registries: CollectorRegistry) -> dict[str, str]:
    """Every series name a scrape can show (``_total``, ``_bucket``, ...), mapped to its family's type."""
    names: dict[str, str] = {}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    for registry in registries:
        for family in registry.collect():
            for suffix in suffixes.get(family.type, ("",)):
                names[family.name + suffix] = family.type
    return names


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_the_hub_reads_nodes_bus_and_instances_at_scrape_time():
    got = samples(hub_registry())
    assert got[("edgeplane_nodes", (("status", "Ready"),))] == 1
    assert got[("edgeplane_nodes", (("status", "NotReady"),))] == 1
    e1 = (("cluster", "default"), ("node", "e1"))
    assert got[("edgeplane_node_on_battery", e1)] == 1
    assert got[("edgeplane_node_battery_percent", e1)] == 40
    assert got[("edgeplane_node_energy_weight", e1)] == 4.5
    assert got[("edgeplane_node_cpu_allocated_cores", e1)] == 1.5
    assert got[("edgeplane_node_cpu_capacity_cores", e1)] == 4
    assert got[("edgeplane_node_mig_slices_allocated", e1)] == 1
    assert got[("edgeplane_node_cordoned", e1)] == 1
    assert got[("edgeplane_node_cordoned", (("cluster", "default"), ("node", "e2")))] == 0
    assert got[("edgeplane_node_policy_version", e1)] == 0  # the model it shipped with
    assert got[("edgeplane_descheduler_moves_total", ())] == 3
    assert ("edgeplane_node_battery_percent", (("cluster", "default"), ("node", "e2"))) not in got
    assert got[("edgeplane_bus_malformed_messages_total", (("kind", "heartbeat"),))] == 2
    assert got[("edgeplane_bus_reconnects_total", (("cluster", "default"),))] == 3
    assert got[("edgeplane_function_instances", (("function", "echo"), ("state", "idle")))] == 1
    assert got[("edgeplane_function_prewarmed_instances_total", (("why", "forecast"),))] == 5
    assert got[("edgeplane_function_prewarmed_instances_total", (("why", "window"),))] == 2
    assert got[("edgeplane_function_prewarmed_instances_total", (("why", "spare"),))] == 0
    assert (
        got[
            (
                "edgeplane_node_energy_joules_total",
                (("cluster", "default"), ("method", "battery"), ("node", "e1")),
            )
        ]
        == 20.0
    )


def _energy() -> EnergyMeter:
    meter = EnergyMeter()
    meter.heard("e1", 0.0, 10.0, "battery", [])
    meter.heard("e1", 2.0, 10.0, "battery", [])
    return meter


def test_the_agent_reads_its_own_state_at_scrape_time():
    got = samples(agent_registry(agent_state()))
    node = (("node", "e1"),)
    assert got[("edgeplane_agent_heartbeats_sent_total", node)] == 7
    assert got[("edgeplane_agent_cold_starts_total", node)] == 1
    assert (
        got[("edgeplane_agent_function_instances", (("function", "echo"), ("node", "e1"), ("state", "busy")))]
        == 1
    )
    assert got[("edgeplane_agent_on_battery", node)] == 1
    assert got[("edgeplane_agent_battery_percent", node)] == 30
    on_mains = samples(agent_registry(agent_state(on_battery=False)))
    assert got[("edgeplane_agent_energy_weight", node)] > on_mains[("edgeplane_agent_energy_weight", node)]


def test_each_hub_has_a_registry_of_its_own():
    first, second = HubMetrics(), HubMetrics()
    first.scheduler.schedule_attempt("edgeplane", "scheduled", 0.01)
    key = ("edgeplane_scheduler_schedule_attempts_total", (("profile", "edgeplane"), ("result", "scheduled")))
    assert samples(first.registry)[key] == 1
    assert key not in samples(second.registry)


@pytest.mark.parametrize(
    ("text", "address"),
    [("9101", ("127.0.0.1", 9101)), (":9101", ("127.0.0.1", 9101)), ("0.0.0.0:80", ("0.0.0.0", 80)),
     ("[::1]:9101", ("::1", 9101))],
)  # fmt: skip
def test_metrics_listen_defaults_to_loopback(text, address):
    assert parse_listen(text) == address


def test_a_bad_metrics_listen_names_the_key():
    with pytest.raises(Exception, match="metrics_listen"):
        load_agent_config(None, {"name": "e1", "metrics_listen": "host:port"})
    assert load_agent_config(None, {"name": "e1"}).metrics_listen is None


# --- the scheduler's timings ----------------------------------------------------------------


def _scheduler(recorder: SchedulerMetrics | None) -> Scheduler:
    sched = Scheduler("edgeplane", seed=7, recorder=recorder)
    for i in range(8):
        sched.upsert_node(NodeState(name=f"n{i}", cpu=4, memory=8 * 2**30))
    return sched


def _workloads() -> list[WorkloadRequest]:
    return [
        WorkloadRequest(
            id=f"w{i}", resources=ResourceRequest(cpu=1 + i % 3, memory=2**30), replicas=1 + i % 2
        )
        for i in range(60)
    ]


def test_timing_changes_no_decision_and_counts_every_attempt():
    registry = CollectorRegistry()
    timed, plain = _scheduler(SchedulerMetrics(registry)), _scheduler(None)
    for request in _workloads():
        a = timed.schedule(request, enqueue=False)
        b = plain.schedule(request, enqueue=False)
        assert [(p.replica, p.node) for p in a.placements] == [(p.replica, p.node) for p in b.placements]
    got = samples(registry)
    attempts = {
        labels: v
        for (name, labels), v in got.items()
        if name == "edgeplane_scheduler_schedule_attempts_total"
    }
    assert sum(attempts.values()) == 60
    assert attempts[(("profile", "edgeplane"), ("result", "scheduled"))] >= 1
    assert attempts[(("profile", "edgeplane"), ("result", "unschedulable"))] >= 1  # the 8 nodes fill up
    points = {
        dict(labels)["extension_point"]
        for (name, labels), v in got.items()
        if name == "edgeplane_scheduler_framework_extension_point_duration_seconds_count" and v
    }
    assert {"Filter", "Score", "Bind"} <= points  # (the edgeplane profile has no PreFilter plugin)


def test_plugins_are_timed_in_a_sample_of_cycles():
    registry = CollectorRegistry()
    sched = _scheduler(SchedulerMetrics(registry, plugin_sample_rate=0.1))
    for request in _workloads():
        sched.schedule(request, enqueue=False)
    got = samples(registry)
    cycles = sched.stats["cycles"]
    filter_cycles = sum(
        v
        for (name, labels), v in got.items()
        if name == "edgeplane_scheduler_framework_extension_point_duration_seconds_count"
        and dict(labels)["extension_point"] == "Filter"
    )
    assert filter_cycles == cycles  # every cycle's Filter point
    per_plugin: Counter[str] = Counter()
    for (name, labels), v in got.items():
        if name == "edgeplane_scheduler_plugin_execution_duration_seconds_count":
            if dict(labels)["extension_point"] == "Filter":
                per_plugin[dict(labels)["plugin"]] += int(v)
    assert per_plugin, "no plugin sampled"
    assert all(0 < n < cycles * 0.4 for n in per_plugin.values())  # a sample, not every cycle


# --- the dashboard --------------------------------------------------------------------------

# PromQL words that look like names: functions and aggregations are followed by "(" and dropped
# anyway; these are the keywords and modifiers that are not.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
             "offset", "inf", "nan"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values, regexes)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery selectors, [$__rate_interval]
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        after = text[match.end() :].lstrip()
        word = match.group()
        if (
            after.startswith("(")
            or word.lower() in _KEYWORDS
            or text[match.start() - 1 : match.start()] == "$"
        ):
            continue
        names.add(word)
    return names


def _exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]


def test_the_name_extraction_sees_through_promql():
    expr = 'histogram_quantile(0.99, sum by (le, function) (rate(a_b_bucket{x="y(z)"}[5m]))) / on(f) c_total'
    assert metric_names(expr) == {"a_b_bucket", "c_total"}


def test_every_metric_the_dashboard_queries_is_exported():
    names = exported(hub_registry(), agent_registry(agent_state()))
    exprs = _exprs()
    assert len(exprs) >= 15
    queried = set().union(*(metric_names(e) for e in exprs))
    missing = sorted(queried - set(names))
    assert not missing, f"the dashboard queries metrics nobody exports: {missing}"
    # A histogram is queried through its buckets, a counter through _total: no bare family names.
    for name in queried:
        base = re.sub(r"_(bucket|sum|count|total)$", "", name)
        kind = names[name]
        assert (kind == "histogram") == name.endswith(("_bucket", "_sum", "_count")), name
        assert (kind == "counter") == name.endswith("_total") or base == name, name


def test_the_provisioning_files_parse():
    import yaml

    folder = ROOT / "deploy" / "grafana" / "provisioning"
    datasources = yaml.safe_load((folder / "datasources" / "edgeplane.yaml").read_text())
    providers = yaml.safe_load((folder / "dashboards" / "edgeplane.yaml").read_text())
    assert datasources["datasources"][0]["type"] == "prometheus"
    assert providers["providers"][0]["type"] == "file"
