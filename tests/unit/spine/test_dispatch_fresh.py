"""A round's new placements are sent by the round itself (``Dispatcher.runs_of``), once: the
periodic read of unacknowledged commands (``Dispatcher.due``) sends them again only after the ack
timeout, and a placement on a node that is not Ready waits for it, as any other."""

from __future__ import annotations

import asyncio

from controlplane.fleet.nodes import NodeLive
from controlplane.hub.dispatch import Dispatcher
from controlplane.specs.workload import WorkloadSpec
from controlplane.store.models import PlacementRow


def _placement(pid: str, node: str, gpus: list[int] | None = None) -> PlacementRow:
    return PlacementRow(
        id=pid,
        workload_id=f"w-{pid}",
        replica=0,
        attempt=1,
        node=node,
        cluster="default",
        status="Scheduled",
        command_id=f"c-{pid}",
        assignment={"gpu_indices": gpus or []},
        acked=False,
        stop_acked=False,
    )


async def test_a_rounds_new_placements_become_run_commands_for_ready_nodes_marked_sent() -> None:
    nodes = {
        "a": NodeLive("a", "default", "Ready", "boot", 3.0, 0.0),
        "b": NodeLive("b", "default", "NotReady", "boot", 3.0, 0.0),
    }
    dispatcher = Dispatcher(None, nodes, resend_after_s=5.0)  # type: ignore[arg-type]
    spec = WorkloadSpec.parse({"name": "w", "command": ["echo", "hi"]})
    runs = dispatcher.runs_of(
        [(_placement("p1", "a", [1]), spec), (_placement("p2", "b"), spec), (_placement("p3", "gone"), spec)]
    )
    assert [(p.id, c.kind, c.command_id, c.placement_id) for p, c in runs] == [("p1", "run", "c-p1", "p1")]
    command = runs[0][1]
    assert command.spec is not None and command.spec.command == ["echo", "hi"]
    assert command.spec.gpu_indices == [1]
    now = asyncio.get_running_loop().time()
    # Marked sent now: not due again before the ack timeout; the one on a NotReady node was never sent.
    assert not dispatcher._due("c-p1", now, dispatcher.resend_after_s)
    assert dispatcher._due("c-p2", now, dispatcher.resend_after_s)
