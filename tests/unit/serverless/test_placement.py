"""Node options for one function: which nodes may run it and how many warm slots each has free."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from edgeplane_contract.messages import FunctionInstance

from controlplane.hub.framework_placer import FrameworkPlacer
from controlplane.hub.placement import PlacementNode
from controlplane.serverless.estimates import Estimates
from controlplane.serverless.placement import node_options, unplaceable_reason
from controlplane.serverless.spec import FunctionSpec
from controlplane.specs.workload import WorkloadSpec

SOURCE = "def handle(event, context):\n    return event\n"


def _spec(**extra: object) -> FunctionSpec:
    spec = FunctionSpec.parse({"name": "echo", "source": SOURCE, "handler": "handle", **extra})
    spec.version = 1
    return spec


def _hub(*names: str, status: str = "Ready", memory: int = 4 * 2**30) -> SimpleNamespace:
    """The function service's view of a hub whose placement engine is the real scheduler."""
    placer = FrameworkPlacer("edgeplane")
    for name in names:
        placer.upsert_node(PlacementNode(name=name, cluster="c1", region="r1", cpu=4, memory=memory))
        placer.set_node_ready(name, status == "Ready")
    nodes = {
        n: SimpleNamespace(status=status, cluster="c1", power_source="mains", battery_percent=None)
        for n in names
    }
    return SimpleNamespace(nodes=nodes, function_nodes=placer.function_nodes, placer=placer)


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


def test_cpu_and_mig_requests_count_like_a_workloads() -> None:
    assert set(_options(_hub("n1"), _spec(cpu=8))) == set()
    assert set(_options(_hub("n1"), _spec(mig="1g.5gb"))) == set()  # no GPU, no MIG slice
    assert set(_options(_hub("n1"), _spec(cpu=2))) == {"n1"}


def test_workload_reservations_leave_no_room_for_a_new_instance_but_a_warm_one_still_serves() -> None:
    hub = _hub("n1", "n2")
    big = WorkloadSpec.parse({"name": "big", "command": ["sleep", "60"], "resources": {"cpu": 4}})
    outcome = hub.placer.place("w1", big, [0])
    full = outcome.choices[0].node
    other = ({"n1", "n2"} - {full}).pop()
    options = _options(hub, _spec())
    assert set(options) == {other} and options[other].can_start

    instances = {full: {"a": _instance("a")}}
    options = _options(hub, _spec(), instances=instances)
    assert options[full].warm_free == 2 and not options[full].can_start
    assert options[other].can_start


def test_the_reason_no_node_fits_is_the_filters_own() -> None:
    hub = _hub("n1", "n2", memory=2**30)
    reason = unplaceable_reason(hub, _spec(memory=8 * 2**30))  # type: ignore[arg-type]
    assert reason.startswith("0/2 nodes are available: 2 ") and "memory" in reason.lower()
    assert unplaceable_reason(hub, _spec()) == ""  # type: ignore[arg-type]


def test_latency_percentiles_interpolate_like_numpy() -> None:
    from collections import deque

    import numpy as np

    from controlplane.serverless.estimates import FunctionStats

    assert FunctionStats.percentile(deque([10.0, 30.0]), 0.5) == 20.0  # not the larger one
    assert FunctionStats.percentile(deque([5.0]), 0.99) == 5.0
    assert FunctionStats.percentile(deque(), 0.5) is None
    samples = [float(x) for x in np.random.default_rng(3).exponential(40, 257)]
    for q in (0.5, 0.9, 0.99):
        assert FunctionStats.percentile(deque(samples), q) == round(float(np.percentile(samples, q * 100)), 3)


def test_instances_of_deleted_functions_are_retired_once_per_resend_period() -> None:
    from types import SimpleNamespace as NS

    from controlplane.serverless.retire import Retirements

    spawned: list[object] = []

    def spawn(coro: object) -> None:
        spawned.append(coro)
        coro.close()  # type: ignore[attr-defined]

    registry = NS(loaded=False, specs={"kept": {1: None}})
    retirements = Retirements(NS(), registry, spawn, resend_s=60)  # type: ignore[arg-type]
    gone, kept = _instance("a"), _instance("b")
    gone.function, kept.function = "gone", "kept"
    retirements.heard("n1", [gone, kept])
    assert spawned == []  # before the registry is loaded, no function is known to be gone
    registry.loaded = True
    retirements.heard("n1", [gone, kept])
    retirements.heard("n1", [gone, kept])  # again within resend_s: not sent twice
    retirements.heard("n2", [gone])
    assert len(spawned) == 2


def test_a_heartbeat_costs_retirement_its_own_instances_never_the_registered_functions() -> None:
    """Every heartbeat passes through ``Retirements.heard``: it looks up the heartbeat's functions
    in the registry, and never walks the registry itself (a set of every registered function per
    heartbeat was O(functions) on the hub's hottest path)."""
    from types import SimpleNamespace as NS

    from controlplane.serverless.retire import Retirements

    class Walked(dict):  # type: ignore[type-arg]
        walks = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Walked.walks += 1
            return super().__iter__()

        def keys(self):  # type: ignore[no-untyped-def]
            Walked.walks += 1
            return super().keys()

    spawned: list[object] = []

    def spawn(coro: object) -> None:
        spawned.append(coro)
        coro.close()  # type: ignore[attr-defined]

    specs = Walked({f"f{i}": {1: None} for i in range(10_000)})
    retirements = Retirements(NS(), NS(loaded=True, specs=specs), spawn, resend_s=60)  # type: ignore[arg-type]
    kept, gone = _instance("a"), _instance("b")
    kept.function, gone.function = "f7", "gone"
    for _ in range(100):
        retirements.heard("n1", [])
        retirements.heard("n1", [kept])
    retirements.heard("n1", [kept, gone])
    assert Walked.walks == 0 and len(spawned) == 1
