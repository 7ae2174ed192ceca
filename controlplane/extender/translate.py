"""A Pod's requests as an edgeplane :class:`WorkloadRequest`, and Kubernetes nodes as edgeplane
node names.

The pod's request is kube's own rule (``PodRequests`` in ``k8s.io/component-helpers``): the sum of
its containers, plus its sidecars (init containers with ``restartPolicy: Always``), at least the
largest init container (with the sidecars started before it), plus ``spec.overhead``. A request a
container leaves out but limits is the limit (the API server's defaulting, for payloads that
skipped it). Resources other than CPU, memory, ``nvidia.com/gpu`` and the MIG profiles are kube's
business and are not read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from edgeplane_contract.resources import MIG_PROFILES, ResourceRequest

from controlplane.errors import ValidationError
from controlplane.extender.kube import KubeNode, as_list, as_object
from controlplane.extender.quantity import parse_quantity
from controlplane.scheduling.model import WorkloadRequest

__all__ = [
    "GPU_RESOURCE",
    "MIG_RESOURCE_PREFIX",
    "NODE_LABEL",
    "UnsupportedPod",
    "edgeplane_node",
    "pod_request",
]

NODE_LABEL = "edgeplane.io/node"
"""A Kubernetes node label naming its edgeplane node, where the two names differ."""
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # the NVIDIA device plugin's "mixed" strategy names
_MAX_DEVICES = 64  # as a workload spec allows (ResourceRequest.parse)
# kube scores a container without requests as 100m and 200Mi (schedutil's non-zero defaults);
# edgeplane's resource model has no empty request, so a pod that asks for none asks for these.
_DEFAULT_CPU = Decimal("0.1")
_DEFAULT_MEMORY = Decimal(200 * 2**20)
_MAX_CPU = Decimal(10**6)
_MAX_MEMORY = Decimal(2**60)

Requests = dict[str, Decimal]


class UnsupportedPod(Exception):
    """A valid pod edgeplane cannot place (whole GPUs and MIG slices together, an unknown MIG
    profile): kube-scheduler hears it as the filter's ``Error``."""


def edgeplane_node(node: KubeNode, label: str = NODE_LABEL) -> str:
    """The edgeplane node a Kubernetes node stands for: its label if set, else its name."""
    return node.labels.get(label) or node.name


def pod_request(pod: Mapping[str, Any]) -> WorkloadRequest:
    """The scheduler's request for one replica of ``pod`` (ValidationError: malformed field)."""
    meta = as_object(pod.get("metadata"), "Pod.metadata", optional=True)
    spec = as_object(pod.get("spec"), "Pod.spec")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or meta.get("generateName") or "pod")
    priority = spec.get("priority") or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError("must be an integer", field="Pod.spec.priority")
    requests = _pod_requests(spec)
    return WorkloadRequest(
        id=f"k8s:{namespace}/{name}",
        name=f"{namespace}/{name}",
        resources=_resources(requests),
        priority=priority,
    )


def _pod_requests(spec: Mapping[str, Any]) -> Requests:
    total: Requests = {}
    for i, container in enumerate(as_list(spec.get("containers"), "Pod.spec.containers")):
        _add(total, _container_requests(container, f"Pod.spec.containers[{i}]"))
    sidecars: Requests = {}
    largest_init: Requests = {}
    for i, container in enumerate(as_list(spec.get("initContainers"), "Pod.spec.initContainers")):
        where = f"Pod.spec.initContainers[{i}]"
        own = _container_requests(container, where)
        if as_object(container, where).get("restartPolicy") == "Always":
            _add(sidecars, own)  # a sidecar runs on beside the init containers after it
            _max(largest_init, sidecars)
        else:
            _max(largest_init, _added(own, sidecars))
    _add(total, sidecars)
    _max(total, largest_init)
    _add(total, _resource_list(spec.get("overhead"), "Pod.spec.overhead"))
    return total


def _container_requests(container: object, where: str) -> Requests:
    resources = as_object(as_object(container, where).get("resources"), f"{where}.resources", optional=True)
    limits = _resource_list(resources.get("limits"), f"{where}.resources.limits")
    requests = _resource_list(resources.get("requests"), f"{where}.resources.requests")
    return {**limits, **requests}


def _resource_list(value: object, where: str) -> Requests:
    """The resources edgeplane reads from a ResourceList (others are not even parsed)."""
    out: Requests = {}
    for name, quantity in as_object(value, where, optional=True).items():
        if name in ("cpu", "memory", GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX):
            out[name] = parse_quantity(quantity, field=f"{where}.{name}")
    return out


def _add(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _added(a: Requests, b: Requests) -> Requests:
    out = dict(a)
    _add(out, b)
    return out


def _max(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, Decimal(0)), amount)


def _resources(requests: Requests) -> ResourceRequest:
    cpu = requests.get("cpu") or _DEFAULT_CPU
    memory = requests.get("memory") or _DEFAULT_MEMORY
    if cpu > _MAX_CPU or memory > _MAX_MEMORY:  # what the contract's parse_cpu/parse_memory allow
        raise UnsupportedPod(f"the pod asks for {cpu} cores and {memory} bytes: beyond any node")
    gpus = _count(requests.get(GPU_RESOURCE, Decimal(0)), GPU_RESOURCE)
    mig: list[str] = []
    for name, amount in sorted(requests.items()):
        if name.startswith(MIG_RESOURCE_PREFIX) and amount:
            profile = name[len(MIG_RESOURCE_PREFIX) :]
            if profile not in MIG_PROFILES:
                known = ", ".join(MIG_RESOURCE_PREFIX + p for p in MIG_PROFILES)
                raise UnsupportedPod(f"{name} is not an A100-40GB MIG profile edgeplane places ({known})")
            mig += [profile] * _count(amount, name)
    if gpus and mig:
        raise UnsupportedPod(f"the pod asks for {GPU_RESOURCE} and MIG slices: edgeplane places either")
    if len(mig) > _MAX_DEVICES:
        raise UnsupportedPod(f"the pod asks for {len(mig)} MIG slices, more than {_MAX_DEVICES}")
    return ResourceRequest(cpu=float(cpu), memory=math.ceil(memory), gpu=gpus, mig=mig)


def _count(amount: Decimal, name: str) -> int:
    if amount != amount.to_integral_value():
        raise UnsupportedPod(f"{name} must be a whole number, got {amount}")
    if amount > _MAX_DEVICES:
        raise UnsupportedPod(f"the pod asks for {amount} {name}; edgeplane places at most {_MAX_DEVICES}")
    return int(amount)
