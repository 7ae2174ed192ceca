"""``controlplane describe``'s pages: a workload with its placements and why each went where it
did (``GET /v1/workloads/{id}/placement``), a node with its capacity, power and isolation."""

from __future__ import annotations

from typing import Any

from controlplane.client.render import age, cpu, memory, percent, table, text
from controlplane.client.tables import gpu_capacity, node_status

__all__ = ["describe_node", "describe_workload"]


def _fields(pairs: list[tuple[str, Any]]) -> list[str]:
    width = max(len(k) for k, _ in pairs) + 1
    return [f"{(k + ':').ljust(width)}  {text(v)}" for k, v in pairs]


def _indent(block: str, by: str = "  ") -> list[str]:
    return [by + line for line in block.splitlines()]


def describe_workload(workload: dict[str, Any], placement: dict[str, Any]) -> str:
    spec = workload.get("spec") or {}
    resources = spec.get("resources") or {}
    asked = f"cpu {cpu(resources.get('cpu'))}, memory {memory(resources.get('memory'))}"
    if resources.get("gpu"):
        asked += f", gpu {resources['gpu']}"
    if resources.get("mig"):
        asked += f", mig {text(resources['mig'])}"
    lines = _fields(
        [
            ("ID", workload.get("id")),
            ("Name", workload.get("name")),
            ("Status", workload.get("status")),
            ("Message", workload.get("message")),
            ("Kind", spec.get("kind")),
            ("Command", " ".join(str(a) for a in spec.get("command") or []) or None),
            ("Resources", asked),
            ("Replicas", workload.get("replicas")),
            ("Priority", workload.get("priority")),
            ("Restart policy", spec.get("restart_policy")),
            ("Nodes", workload.get("nodes")),
            ("Exit code", workload.get("exit_code")),
            ("Restarts", workload.get("restarts")),
            ("Created", workload.get("created_at")),
            ("Started", workload.get("started_at")),
            ("Finished", workload.get("finished_at")),
        ]
    )
    placements = workload.get("placements") or []
    lines.append("Placements:")
    if placements:
        rows = [
            (
                p.get("replica"),
                p.get("attempt"),
                p.get("node"),
                p.get("status"),
                p.get("exit_code"),
                p.get("restarts"),
                age(p.get("scheduled_at")),
                p.get("message"),
            )
            for p in placements
        ]
        lines += _indent(
            table(("REPLICA", "ATTEMPT", "NODE", "STATUS", "EXIT", "RESTARTS", "AGE", "MESSAGE"), rows)
        )
    else:
        lines.append("  none yet" + (f": {workload['message']}" if workload.get("message") else ""))
    lines.append("Placement explanation:")
    decisions = placement.get("decisions") or []
    if not decisions:
        lines.append("  no placement decided yet")
    for decision in decisions:
        lines += _indent("\n".join(_decision(decision)))
    return "\n".join(lines)


def _decision(decision: dict[str, Any]) -> list[str]:
    explanation = decision.get("explanation") or {}
    head = (
        f"replica {decision.get('replica')}, attempt {decision.get('attempt')}: "
        f"node {decision.get('node')} in cluster {decision.get('cluster')}"
    )
    if explanation.get("profile"):
        head += f" (profile {explanation['profile']})"
    lines = [head]
    nodes, actions = explanation.get("nodes") or {}, explanation.get("actions") or {}
    if nodes:
        lines.append(
            f"  nodes: {nodes.get('total')} in total, {nodes.get('feasible')} feasible, "
            f"{nodes.get('scored')} scored"
        )
    if actions:
        lines.append(
            f"  options: {actions.get('remaining')} of {actions.get('total')} left after the filters"
        )
        for reason, count in (actions.get("masked_by") or {}).items():
            lines.append(f"    {count} removed by {reason}")
    candidates = [c for c in [explanation.get("chosen"), *(explanation.get("alternatives") or [])] if c]
    if candidates:
        lines += [
            "  candidates (normalized score x weight per plugin):",
            *_indent(_candidates(candidates), "    "),
        ]
    reward = (explanation.get("chosen") or {}).get("reward")
    if isinstance(reward, dict):
        terms = ", ".join(f"{k} {v:.4g}" for k, v in reward.items() if isinstance(v, int | float))
        lines.append(f"  reward of the choice: {terms}")
    bids = explanation.get("bids")
    if isinstance(bids, dict):
        lines.append(f"  decided by: {bids.get('decided_by')}, winner {bids.get('winner')}")
        rows = [
            (
                c.get("node"),
                c.get("asked"),
                c.get("answered"),
                c.get("accept"),
                _num(c.get("score")),
                c.get("source"),
            )
            for c in bids.get("candidates") or []
        ]
        if rows:
            lines += _indent(
                table(("BIDDER", "ASKED", "ANSWERED", "ACCEPT", "SCORE", "POLICY"), rows), "    "
            )
    return lines


def _candidates(candidates: list[dict[str, Any]]) -> str:
    plugins = list((candidates[0].get("plugins") or {}).keys())
    header = (
        "",
        "NODE",
        "SCORE",
        *(f"{name} x{_num(candidates[0]['plugins'][name].get('weight'))}" for name in plugins),
    )
    rows = []
    for index, candidate in enumerate(candidates):
        scores = candidate.get("plugins") or {}
        rows.append(
            (
                "chosen" if index == 0 else "",
                candidate.get("node"),
                _num(candidate.get("score")),
                *(_num((scores.get(name) or {}).get("normalized")) for name in plugins),
            )
        )
    return table(header, rows)


def _num(value: Any) -> str | None:
    return f"{value:.4g}" if isinstance(value, int | float) and not isinstance(value, bool) else None


def describe_node(node: dict[str, Any], workloads: list[dict[str, Any]]) -> str:
    resources, allocated = node.get("resources") or {}, node.get("allocated") or {}
    telemetry, power = node.get("telemetry") or {}, node.get("power") or {}
    weights = node.get("weights") or {}
    lines = _fields(
        [
            ("Name", node.get("name")),
            ("Status", node_status(node)),
            ("Cluster", f"{node.get('cluster')} (region {node.get('region') or '-'})"),
            ("Type", node.get("node_type")),
            ("Labels", [f"{k}={v}" for k, v in (node.get("labels") or {}).items()]),
            ("Agent", node.get("agent_version")),
            ("Registered", node.get("registered_at")),
            ("Last heartbeat", f"{node.get('last_heartbeat_at')} ({age(node.get('last_heartbeat_at'))} ago)"),
            ("Power", power.get("source")),
            (
                "Battery",
                f"{power['battery_percent']:.0f}%"
                if isinstance(power.get("battery_percent"), int | float)
                else None,
            ),
            ("Weights", ", ".join(f"{k} {v:g}" for k, v in weights.items()) or None),
            ("Local policy", telemetry.get("policy")),
        ]
    )
    lines.append("Capacity and allocation:")
    rows: list[tuple[Any, ...]] = [
        (
            "cpu",
            cpu(resources.get("cpu")),
            cpu(allocated.get("cpu")),
            percent(allocated.get("cpu"), resources.get("cpu")),
        ),
        (
            "memory",
            memory(resources.get("memory")),
            memory(allocated.get("memory")),
            percent(allocated.get("memory"), resources.get("memory")),
        ),
        (
            "gpus",
            gpu_capacity(node),
            allocated.get("gpus", 0),
            percent(allocated.get("gpus", 0), gpu_capacity(node)),
        ),
    ]
    if allocated.get("mig"):
        rows.append(("mig", "-", len(allocated["mig"]), "-"))
    lines += _indent(table(("RESOURCE", "CAPACITY", "ALLOCATED", "USED"), rows))
    if telemetry:
        lines.append("Telemetry: " + _telemetry(telemetry))
    gpus = resources.get("gpus") or []
    if isinstance(gpus, list) and gpus:
        lines.append("GPUs:")
        lines += [
            f"  {text(g) if not isinstance(g, dict) else ', '.join(f'{k} {text(v)}' for k, v in g.items())}"
            for g in gpus
        ]
    isolation = node.get("isolation") or {}
    if isolation:
        lines.append("Isolation:")
        lines += _indent("\n".join(_fields(sorted(isolation.items()))))
    lines.append("Workloads placed here (latest first):")
    if workloads:
        workload_rows = [
            (w.get("id"), w.get("name"), w.get("status"), age(w.get("created_at"))) for w in workloads
        ]
        lines += _indent(table(("ID", "NAME", "STATUS", "AGE"), workload_rows))
    else:
        lines.append("  none")
    return "\n".join(lines)


def _telemetry(telemetry: dict[str, Any]) -> str:
    parts = [f"cpu {text(telemetry.get('cpu_percent'))}%"]
    if telemetry.get("memory_total_bytes"):
        used, total = telemetry.get("memory_used_bytes"), telemetry["memory_total_bytes"]
        parts.append(f"memory used {memory(used)} of {memory(total)}")
    if isinstance(telemetry.get("load_1m"), int | float):
        parts.append(f"load {telemetry['load_1m']:.2f}")
    if isinstance(telemetry.get("power_w"), int | float):
        parts.append(f"power {telemetry['power_w']:.1f} W")
    return ", ".join(parts)
