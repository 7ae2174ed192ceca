"""Node options for one function: which nodes may run it and how many warm slots each has free."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from edgeplane_contract.messages import FunctionInstance

from controlplane.serverless.estimates import Estimates
from controlplane.serverless.placement import node_options
from controlplane.serverless.spec import FunctionSpec

SOURCE = "def handle(event, context):\n    return event\n"


def _spec(**extra: object) -> FunctionSpec:
    spec = FunctionSpec.parse({"name": "echo", "source": SOURCE, "handler": "handle", **extra})
    spec.version = 1
    return spec


def _hub(*names: str, status: str = "Ready") -> SimpleNamespace:
    nodes = {
        n: SimpleNamespace(status=status, cluster="c1", power_source="mains", battery_percent=None)
        for n in names
    }
    return SimpleNamespace(
        nodes=nodes,
        node_capacity=lambda node: {"memory": 4 * 2**30, "gpus": 0},
        federation=SimpleNamespace(cluster=lambda name: None),
    )


def _instance(instance_id: str, *, in_flight: int = 0, state: str = "idle") -> FunctionInstance:
    return FunctionInstance(
        instance_id=instance_id,
        function="echo",
        version=1,
        state=state,
        max_concurrency=2,
        memory=128,
        in_flight=in_flight,
    )


def _options(hub: SimpleNamespace, spec: FunctionSpec, **kwargs: object) -> dict[str, object]:
    found = node_options(
        hub,  # type: ignore[arg-type]
        spec,
        set(),
        instances=kwargs.get("instances", {}),  # type: ignore[arg-type]
        in_flight=kwargs.get("in_flight", Counter()),  # type: ignore[arg-type]
        estimates=Estimates(),
    )
    return {o.node: o for o in found}


def test_free_slots_count_what_the_hub_dispatched_since_the_heartbeat() -> None:
    instances = {"n1": {"a": _instance("a", in_flight=1), "b": _instance("b", state="starting")}}
    options = _options(
        _hub("n1", "n2"), _spec(), instances=instances, in_flight=Counter({("n1", "echo", 1): 2})
    )
    assert options["n1"].warm_free == 0 and options["n1"].busy_instances == 2
    assert options["n1"].in_flight == 2
    assert options["n2"].warm_free == 0 and options["n2"].busy_instances == 0


def test_affinity_and_capacity_leave_nodes_out() -> None:
    assert set(_options(_hub("n1", "n2"), _spec(affinity={"nodes": ["n2"]}))) == {"n2"}
    assert set(_options(_hub("n1"), _spec(affinity={"regions": ["eu"]}))) == set()
    assert set(_options(_hub("n1"), _spec(memory=8 * 2**30))) == set()
    assert set(_options(_hub("n1", status="NotReady"), _spec())) == set()
