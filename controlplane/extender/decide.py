"""The filter and prioritize answers, from the hub's scheduler (read only: nothing is reserved).

kube-scheduler places the pod and binds it itself, so edgeplane's ledger does not hold what kube
placed; what edgeplane adds is its profile's view of the fleet (readiness, power source, battery
and the energy weight w3, GPU/MIG fragmentation, its own placements).
"""

from __future__ import annotations

import math

from controlplane.extender.kube import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
)
from controlplane.extender.translate import NODE_LABEL, UnsupportedPod, edgeplane_node, pod_request
from controlplane.scheduling.scheduler import Scheduler

__all__ = ["KUBE_REASONS", "filter_nodes", "kube_reason", "prioritize_nodes", "unknown_node_reason"]


# kube-scheduler's NodeResourcesFit says "Insufficient <resource>" whether the node is full now or
# too small ever (the code, Unschedulable or UnschedulableAndUnresolvable, tells them apart): the
# extender's answers use its words, for the events and `kubectl describe pod` they end up in.
KUBE_REASONS = {
    "node has too little cpu": "Insufficient cpu",
    "node has too little memory": "Insufficient memory",
    "node has too few GPUs": "Insufficient nvidia.com/gpu",
    "node has too few DPUs": "Insufficient edgeplane.io/dpu",
    "node has too little ephemeral storage": "Insufficient ephemeral-storage",
}


def kube_reason(reason: str) -> str:
    """The scheduler's reason as kube-scheduler words it, where it has words for it."""
    return KUBE_REASONS.get(reason, reason)


def unknown_node_reason(name: str, label: str = NODE_LABEL) -> str:
    return (
        f"edgeplane knows no node {name!r} (the Kubernetes node's name, or its {label} label, "
        "names its edgeplane node)"
    )


def filter_nodes(scheduler: Scheduler, args: ExtenderArgs, label: str = NODE_LABEL) -> ExtenderFilterResult:
    """Which of the given nodes fit one replica of the pod under the scheduler's profile; the
    rest with the first filter's reason (unknown nodes and those preemption cannot help are
    unresolvable). ValidationError: a malformed pod."""
    result = ExtenderFilterResult(node_names_form=args.node_names_form)
    try:
        request = pod_request(args.pod)
    except UnsupportedPod as exc:
        result.error = f"edgeplane: {exc}"
        return result
    targets = [edgeplane_node(node, label) for node in args.nodes]
    verdicts = scheduler.filter_nodes(request, targets)
    known = scheduler.nodes.index
    for node, target in zip(args.nodes, targets, strict=True):
        verdict = verdicts[target]
        if verdict.fits:
            result.passed.append(node)
        elif target not in known:
            result.failed_and_unresolvable[node.name] = unknown_node_reason(target, label)
        elif verdict.unresolvable:
            result.failed_and_unresolvable[node.name] = kube_reason(verdict.reason)
        else:
            result.failed[node.name] = kube_reason(verdict.reason)
    return result


def prioritize_nodes(scheduler: Scheduler, args: ExtenderArgs, label: str = NODE_LABEL) -> list[HostPriority]:
    """Every given node's score, 0-10: the profile's Score totals over the nodes that fit, mapped
    linearly from their lowest (0) to their highest (10); all alike score 10. A node that does
    not fit, is unknown or was excluded scores 0; so does every node of a pod edgeplane cannot
    place (kube-scheduler's own scores and other extenders decide then)."""
    try:
        request = pod_request(args.pod)
    except UnsupportedPod:
        return [HostPriority(node.name, 0) for node in args.nodes]
    targets = [edgeplane_node(node, label) for node in args.nodes]
    totals = scheduler.score_nodes(request, targets)
    finite = [t for t in totals.values() if math.isfinite(t)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = []
    for node, target in zip(args.nodes, targets, strict=True):
        total = totals.get(target, -math.inf)
        if not math.isfinite(total):
            score = 0
        elif high - low <= 1e-9 * max(1.0, abs(high)):
            score = MAX_EXTENDER_PRIORITY
        else:
            score = round(MAX_EXTENDER_PRIORITY * (total - low) / (high - low))
        out.append(HostPriority(node.name, score))
    return out
