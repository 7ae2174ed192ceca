"""Fixtures for scheduler tests: builders of small fleets, requests and schedulers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from edgeplane_contract.resources import ResourceRequest

from controlplane.scheduling.model import GpuDevice, NodeState, WorkloadRequest
from controlplane.scheduling.nodetable import ZONE_LABEL
from controlplane.scheduling.scheduler import Scheduler

GiB = 2**30


def cpu_node(name: str, cpu: float = 64, mem_gib: int = 256, **kw: Any) -> NodeState:
    labels = kw.pop("labels", {})
    labels.setdefault(ZONE_LABEL, kw.pop("zone", "z0"))
    return NodeState(name=name, cpu=cpu, memory=mem_gib * GiB, labels=labels, **kw)


def gpu_node(name: str, *, mig: int = 0, gpus: int = 2, **kw: Any) -> NodeState:
    kw.setdefault("node_type", "gpu")
    return cpu_node(name, gpus=[GpuDevice(i, mig_enabled=i < mig) for i in range(gpus)], **kw)


def request(wid: str, cpu: float = 1, mem_gib: float = 1, **kw: Any) -> WorkloadRequest:
    res = ResourceRequest(
        cpu=cpu, memory=int(mem_gib * GiB), gpu=kw.pop("gpu", 0), mig=kw.pop("mig", []), dpu=kw.pop("dpu", 0)
    )
    return WorkloadRequest(id=wid, resources=res, **kw)


def scheduler(profile: Any = "default", nodes: list[NodeState] | None = None, **kw: Any) -> Scheduler:
    sched = Scheduler(profile, seed=kw.pop("seed", 0), clock=kw.pop("clock", lambda: 0.0), **kw)
    for node in nodes or []:
        sched.upsert_node(node)
    return sched


@pytest.fixture
def mk() -> SimpleNamespace:
    """``mk.cpu_node``, ``mk.gpu_node``, ``mk.request``, ``mk.scheduler``, ``mk.GiB``."""
    return SimpleNamespace(
        cpu_node=cpu_node, gpu_node=gpu_node, request=request, scheduler=scheduler, GiB=GiB
    )
