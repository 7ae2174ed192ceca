"""Asking candidate nodes' local policies before binding a replica (the bid round).

For one replica the scheduler proposes a node and its top alternatives, each with the hub's
estimate of the placement reward. The hub asks every candidate that runs a local policy for a
bid (NATS requests in parallel, one deadline for all). A node that answers *decline* is out; a
node that answers *accept* is valued at its bid's ``score_requested`` (its expected reward, under
its own weights, which rise with w3 on battery, of running the replica with the requested
quotas, as the hub places it; ``score`` from older agents); a node that does not answer in time
is valued at the hub's own reward estimate. The best value wins. When nothing can be compared
(no estimates and no accepting bid), the scheduler's choice stands.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from edgeplane_contract.messages import BidRequestV1, BidV1, MessageError, decode, encode

from controlplane.hub.nodes import NodeDirectory
from controlplane.hub.placement import ReplicaChoice
from controlplane.hub.spec import WorkloadSpec

__all__ = ["BidCandidate", "BidOutcome", "BidRow", "candidates_of", "run_bid_round"]


@dataclass(frozen=True, slots=True)
class BidCandidate:
    """A node the scheduler proposed for the replica, with its estimate of the placement reward."""

    node: str
    hub_reward: float | None = None


@dataclass(slots=True)
class BidRow:
    """One candidate in the bid round's table (the ``bids.candidates`` of an explanation)."""

    node: str
    asked: bool
    hub_reward: float | None
    bid: BidV1 | None = None
    value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"node": self.node, "asked": self.asked, "hub_reward": self.hub_reward}
        if self.bid is None:
            row["answered"] = False
        else:
            bid = self.bid
            row.update(
                answered=True,
                accept=bid.accept,
                score=bid.score,
                score_requested=bid.score_requested,
                action=bid.action,
                accelerator=bid.accelerator,
                source=bid.source,
                weights=bid.weights,
                latency_us=bid.latency_us,
            )
        row["value"] = self.value
        return row


@dataclass(slots=True)
class BidOutcome:
    winner: str
    decided_by: str  # bid | hub-estimate | scheduler
    rows: list[BidRow] = field(default_factory=list)


def candidates_of(choice: ReplicaChoice) -> list[BidCandidate]:
    """The scheduler's choice first, then its alternatives, from the replica's explanation."""
    found = [
        BidCandidate(c.node, c.reward.total if c.reward is not None else None)
        for c in choice.explanation.candidates
    ]
    if not found or found[0].node != choice.node:
        found.insert(0, BidCandidate(choice.node))
    return found


async def _ask(hub: NodeDirectory, node: str, request: BidRequestV1, deadline_s: float) -> BidV1 | None:
    live = hub.nodes.get(node)
    if live is None:
        return None
    subject = hub.bus.subjects(live.cluster).bid(node)
    try:
        data = await hub.bus.request(live.cluster, subject, encode(request), deadline_s=deadline_s)
        bid = decode(data, BidV1)
    except MessageError:
        hub.bus.malformed["bid"] += 1
        return None
    except Exception:  # timeout, no responders, no connection: fall back to the hub's estimate
        return None
    return bid if bid.request_id == request.request_id else None


async def run_bid_round(
    hub: NodeDirectory, workload_id: str, spec: WorkloadSpec, choice: ReplicaChoice, *, deadline_ms: float
) -> BidOutcome | None:
    """The node this replica should go to, or None when no candidate runs a local policy."""
    candidates = candidates_of(choice)
    asked = [c for c in candidates if (live := hub.nodes.get(c.node)) and live.telemetry.get("policy")]
    if not asked:
        return None
    request = BidRequestV1(
        request_id=uuid.uuid4().hex,
        workload_id=workload_id,
        replica=choice.replica,
        offer=spec.offer(),
        deadline_ms=deadline_ms,
    )
    bids = await asyncio.gather(*(_ask(hub, c.node, request, deadline_ms / 1000) for c in asked))
    by_node = {c.node: bid for c, bid in zip(asked, bids, strict=True)}
    rows = []
    best: tuple[float, str, str] | None = None
    for candidate in candidates:
        bid = by_node.get(candidate.node)
        asked_it = candidate.node in by_node
        row = BidRow(candidate.node, asked=asked_it, hub_reward=candidate.hub_reward, bid=bid)
        if bid is not None:
            # The replica runs with its requested quotas, so compare what the node expects of
            # those; the chosen bin's score over-values empty nodes (docs/bench-policy.md).
            as_placed = bid.score_requested if bid.score_requested is not None else bid.score
            row.value, how = (as_placed, "bid") if bid.accept else (None, "")
        else:
            row.value, how = candidate.hub_reward, "hub-estimate"
        rows.append(row)
        if row.value is not None and (best is None or row.value > best[0]):
            best = (row.value, candidate.node, how)
    if best is None:
        return BidOutcome(winner=choice.node, decided_by="scheduler", rows=rows)
    return BidOutcome(winner=best[1], decided_by=best[2], rows=rows)
