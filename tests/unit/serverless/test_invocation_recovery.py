"""The restarted hub's questions about invocations in flight, against scripted node answers."""

from __future__ import annotations

import asyncio

from edgeplane_contract.messages import InvocationQueryV1, InvocationStatusV1, InvokeResultV1, decode, encode

from controlplane.serverless.recovery import InFlight, recover_invocations


async def test_finished_ones_get_their_result_running_ones_are_waited_for_unknown_ones_fail():
    asked: list[str] = []
    finished: dict[str, tuple[str, object]] = {}
    failed: dict[str, str] = {}
    clock = {"round": 0}

    async def request(cluster: str, subject: str, payload: bytes) -> bytes:
        query = decode(payload, InvocationQueryV1)
        asked.append(subject)
        clock["round"] += 1
        if subject.endswith("n2"):
            raise TimeoutError  # a node that is not back yet
        reply = InvocationStatusV1(query_id=query.query_id)
        for invocation_id in query.invocation_ids:
            if invocation_id == "done":
                reply.finished.append(InvokeResultV1(invocation_id="done", ok=True, result={"x": 1}))
            elif invocation_id == "busy":
                reply.running.append("busy")
        return encode(reply)

    async def finish(invocation_id: str, node: str, result: InvokeResultV1) -> None:
        finished[invocation_id] = (node, result.result)

    async def fail(invocation_id: str, reason: str) -> None:
        failed[invocation_id] = reason

    await asyncio.wait_for(
        recover_invocations(
            [InFlight("done", 5.0), InFlight("busy", 0.2), InFlight("ghost", 5.0)],
            nodes=lambda: [("c", "n1"), ("c", "n2")],
            subject_of=lambda cluster, node: f"{cluster}.{node}",
            request=request,
            finish=finish,
            fail=fail,
            grace_s=0.3,
            poll_s=0.05,
            margin_s=0.2,
        ),
        timeout=10,
    )
    assert finished == {"done": ("n1", {"x": 1})}
    assert "no node knows" in failed["ghost"]
    assert "did not finish within its timeout" in failed["busy"]
    assert "c.n2" in asked and clock["round"] > 2
