"""Collecting the agents' decision logs (``POST /v1/decision-logs``, ``controlplane policy
collect``): the field experience a local policy is retrained from.

The hub asks each Ready node (or the nodes named) for the newest ``limit`` entries of its
decision log over NATS (the ``decisions`` subject, :meth:`edge_agent.bids.Bids.on_decisions`),
all at once with one deadline. Rewards arrive already Laplace-noised by the agent for its own
``privacy_epsilon``: the hub never sees an exact reward, and it says which epsilon each node
used. A node that does not answer in time, answers nonsense, or is not Ready is listed under
``missing`` with the reason; the others' entries come back as they are.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from controlplane.errors import ValidationError
from controlplane.fleet.nodes import NodeDirectory
from controlplane.schema import Field, Integer, Model, Number, StringList

__all__ = ["DECISION_LOG_REQUEST", "CollectedLogs", "DecisionLogRequest", "NodeLog", "ask_node", "collect"]

MAX_ENTRIES = 10_000  # per node: the agents' default log length, and what they answer at most


@dataclass(frozen=True, slots=True)
class DecisionLogRequest:
    """Which logs to collect: the newest ``limit`` entries of each of ``nodes`` (all Ready nodes
    when empty), waiting at most ``deadline_s`` for the answers."""

    limit: int = 1000
    nodes: list[str] = field(default_factory=list)
    deadline_s: float = 5.0


DECISION_LOG_REQUEST: Model[DecisionLogRequest] = Model(
    "DecisionLogRequest",
    DecisionLogRequest,
    (
        Field(
            "limit",
            Integer(1, MAX_ENTRIES, f"must be an integer from 1 to {MAX_ENTRIES}"),
            description="the newest entries to take from each node (default 1000; fewer come back "
            "where a node's answer would not fit one NATS message)",
        ),
        Field("nodes", StringList(), description="these nodes only (default: every Ready node)"),
        Field(
            "deadline_s",
            Number("must be a number of seconds from 0.1 to 30", low=0.1, high=30.0),
            description="how long to wait for the nodes' answers (default 5)",
        ),
    ),
)


@dataclass(slots=True)
class NodeLog:
    """One node's answer."""

    node: str
    epsilon: float
    truncated: bool
    entries: list[dict[str, Any]]


@dataclass(slots=True)
class CollectedLogs:
    nodes: list[NodeLog] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (node, why)


async def collect(hub: NodeDirectory, request: DecisionLogRequest) -> CollectedLogs:
    """Every asked node's log (module docstring). ``ValidationError`` for a node the hub does
    not know."""
    known = hub.nodes
    for name in request.nodes:
        if name not in known:
            raise ValidationError(f"node {name!r} is not known to the hub", field="nodes")
    names = sorted(set(request.nodes)) if request.nodes else sorted(known)
    result = CollectedLogs()
    asked = []
    for name in names:
        live = known[name]
        if live.status != "Ready":
            if request.nodes:  # named: say why it gave nothing; unnamed NotReady nodes are skipped
                result.missing.append((name, f"node is {live.status}"))
            continue
        asked.append(name)
    payload = json.dumps({"limit": request.limit}).encode()
    answers = await asyncio.gather(*(_ask(hub, name, payload, request.deadline_s) for name in asked))
    for name, answer in zip(asked, answers, strict=True):
        if isinstance(answer, NodeLog):
            result.nodes.append(answer)
        else:
            result.missing.append((name, answer))
    return result


async def ask_node(
    hub: NodeDirectory, name: str, *, limit: int = 1000, deadline_s: float = 5.0
) -> NodeLog | str:
    """One node's newest ``limit`` entries, checked as :func:`collect` checks them, or why there
    are none (a malformed answer is counted and never passed on)."""
    return await _ask(hub, name, json.dumps({"limit": limit}).encode(), deadline_s)


async def _ask(hub: NodeDirectory, name: str, payload: bytes, deadline_s: float) -> NodeLog | str:
    """The node's log, or why there is none."""
    live = hub.nodes.get(name)
    if live is None:
        return "node is gone"
    subject = hub.bus.subjects(live.cluster).node(name, "decisions")
    try:
        data = await hub.bus.request(live.cluster, subject, payload, deadline_s=deadline_s)
    except TimeoutError:
        return f"no answer within {deadline_s:g} s"
    except Exception as exc:  # no responders, no connection: that node gives nothing this time
        return f"unreachable: {type(exc).__name__}"
    try:
        return _parse(name, json.loads(data))
    except (ValueError, TypeError, KeyError) as exc:
        hub.bus.malformed["decisions"] += 1
        return f"malformed answer: {exc}"


def _parse(name: str, body: Any) -> NodeLog:
    if not isinstance(body, dict) or body.get("v") != 1:
        raise ValueError("not a version 1 decision log")
    if body.get("node") != name:
        raise ValueError(f"answered for node {body.get('node')!r}")
    epsilon = body["epsilon"]
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not epsilon > 0:
        raise ValueError("epsilon must be a positive number")
    entries = body["entries"]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("entries must be a list of objects")
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"more than {MAX_ENTRIES} entries")
    return NodeLog(name, float(epsilon), bool(body.get("truncated", False)), entries)
