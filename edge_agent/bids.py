"""The local policy on the bus: answers to the hub's bid requests, and the decision log it collects."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable

from nats.aio.msg import Msg

from edgeplane_contract.messages import BidRequestV1, BidV1, MessageError, decode

from edge_agent.decisions import DecisionLog
from edge_agent.hub_link import HubLink
from edge_agent.local_decisions import LocalDecider

__all__ = ["Bids"]

log = logging.getLogger("edgeplane.agent.bids")

DECISIONS_DEFAULT = 1000  # entries a collection gets when it does not say
DECISIONS_MAX = 10_000  # the most one collection may ask for (the log's default length)
DECISIONS_MARGIN = 4096  # bytes of a decisions answer kept for its envelope and NATS headers


class Bids:
    """Answers ``bid`` requests with the local policy and ``decisions`` requests with the log."""

    def __init__(
        self,
        *,
        node: str,
        decider: LocalDecider,
        decisions: DecisionLog,
        link: HubLink,
        counters: Counter[str],
        on_accept: Callable[[], None] | None = None,
    ) -> None:
        self.node = node
        self.on_accept = on_accept  # a start is likely to follow: see edge_agent/cgroup_primer.py
        self.decider = decider
        self.decisions = decisions
        self.link = link
        self.counters = counters

    async def on_bid(self, msg: Msg) -> None:
        try:
            request = decode(msg.data, BidRequestV1)
        except MessageError as exc:
            self.link.malformed("bid", exc)
            return
        if self.decider.policy is None:
            return  # no local policy: let the hub's deadline pass and use its own scores
        outcome = self.decider.local_decision(
            purpose="bid",
            request_id=request.request_id,
            workload_id=request.workload_id,
            replica=request.replica,
            offer=request.offer,
        )
        if outcome is None:  # the policy raised: no answer, the hub falls back to its estimate
            return
        decision = outcome.decision
        bid = BidV1(
            request_id=request.request_id,
            node=self.node,
            accept=not decision.decline,
            action=decision.action,
            cpu=decision.cpu,
            memory=int(decision.memory),
            gpu_units=decision.gpu_units,
            accelerator=decision.accelerator,
            score=decision.score,
            weights=list(outcome.weights),
            source=decision.source,
            masked=decision.masked,
            latency_us=decision.latency_us,
            score_requested=decision.requested_score,
        )
        self.counters["bids"] += 1
        await self.link.reply(msg, bid)
        if not decision.decline and self.on_accept is not None:
            self.on_accept()  # after the answer: the hub's round waits for it, the start comes later
        # Answered first: the audit (edge_agent/decision_quality.py) costs milliseconds.
        try:
            self.decider.quality.audit(outcome.node, outcome.offer, outcome.weights, decision.action)
        except Exception as exc:  # an audit must never cost the agent more than the audit
            self.counters["audit_errors"] += 1
            log.debug("decision audit failed: %s", exc)

    async def on_decisions(self, msg: Msg) -> None:
        """The hub collects the decision log for retraining (rewards Laplace-noised): the newest
        ``limit`` entries (the request's JSON ``{"limit": N}``, 1000 without one), fewer where
        the answer would not fit one NATS message (``truncated`` says so). A request that is not
        such an object is counted as malformed and dropped (the asker's deadline answers it)."""
        if not msg.reply:
            return
        limit = DECISIONS_DEFAULT
        if msg.data:
            try:
                request = json.loads(msg.data)
                if not isinstance(request, dict):
                    raise ValueError("the request must be a JSON object")
                asked = request.get("limit", DECISIONS_DEFAULT)
                if isinstance(asked, bool) or not isinstance(asked, int) or not 1 <= asked <= DECISIONS_MAX:
                    raise ValueError(f"limit must be an integer from 1 to {DECISIONS_MAX}")
                limit = asked
            except ValueError as exc:
                self.link.malformed("decisions", MessageError("decisions", str(exc), field="limit"))
                return
        # Each entry is encoded once: its size decides whether it fits, and the answer is made of it.
        encoded = [json.dumps(entry) for entry in self.decisions.export(limit=limit)]
        fitted = _newest_that_fit(encoded, self.link.max_payload() - DECISIONS_MARGIN)
        envelope = {
            "v": 1,
            "node": self.node,
            "epsilon": self.decisions.epsilon,
            "truncated": len(fitted) < len(encoded),
        }
        answer = json.dumps(envelope)[:-1] + ', "entries": [' + ", ".join(fitted) + "]}"
        with contextlib.suppress(Exception):
            await msg.respond(answer.encode())


def _newest_that_fit(encoded: list[str], budget: int) -> list[str]:
    """The newest encoded entries that fit ``budget`` bytes (the list's own separators included)."""
    used, first = 0, len(encoded)
    for i in range(len(encoded) - 1, -1, -1):
        size = len(encoded[i]) + 2
        if used + size > budget:
            break
        used += size
        first = i
    return encoded[first:]
