"""Asking candidate nodes' local policies before binding a replica (the bid round).

For one replica the scheduler proposes a node and its top alternatives, each with the hub's
estimate of the placement reward. The hub asks every candidate that runs a local policy for a
bid (NATS requests in parallel, one deadline for all). A node that answers *decline* is out; a
node that answers *accept* is valued at its bid's ``score_requested`` (its expected reward, under
its own weights, which rise with w3 on battery, of running the replica with the requested
quotas, as the hub places it; ``score`` from older agents); a node that does not answer in time
is valued at the hub's own reward estimate. The best value wins. When nothing can be compared
(no estimates and no accepting bid), the scheduler's choice stands.

The SLA shield (``shield_margin``; :mod:`controlplane.scheduling.shield`): the agents' models do
not know the interference and the SLA-miss risk the hub learned, so a candidate whose QoS term in
the hub's estimate is more than the margin below the best candidate's still in the running is
taken out (``shielded`` in the explanation), as the simulator's ``LocalPolicyBid`` does.

The round ends as soon as every node it waits for has answered: the deadline bounds a silent
node, it is not a wait. A node whose local policy let a deadline pass is *on probation*
(:class:`BidSilence`, per boot): it is still asked, but no round waits for it longer than for the
others, so one silent node does not cost every placement the whole deadline; its answer still
counts when it arrives in time, and any answer within the deadline (also one that came after its
round ended) takes it off probation.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgeplane_contract.messages import BidRequestV1, BidV1, MessageError, decode, encode

from controlplane.fleet.nodes import NodeDirectory
from controlplane.hub.placement import ReplicaChoice
from controlplane.scheduling.shield import unsafe_of
from controlplane.specs.workload import WorkloadSpec

__all__ = ["BidCandidate", "BidOutcome", "BidRow", "BidSilence", "candidates_of", "decide", "run_bid_round"]


@dataclass(frozen=True, slots=True)
class BidCandidate:
    """A node the scheduler proposed for the replica, with its estimate of the placement reward."""

    node: str
    hub_reward: float | None = None
    # What the SLA-miss risk the hub learned from outcomes takes off this node's reward: an
    # agent's bid, whose model does not know it, is lowered by as much (0: none learned).
    risk_cost: float = 0.0
    # The hub's QoS term for this node (R_qos: predicted slowdown against the SLA, the neighbours'
    # and the learned miss risk), what the SLA shield compares (None: no estimate).
    qos: float | None = None


@dataclass(slots=True)
class BidRow:
    """One candidate in the bid round's table (the ``bids.candidates`` of an explanation)."""

    node: str
    asked: bool
    hub_reward: float | None
    bid: BidV1 | None = None
    value: float | None = None
    waited: bool = True  # False: on probation (``BidSilence``), the round did not wait for it
    shielded: bool = False  # taken out by the SLA shield (its QoS too far below the best's)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"node": self.node, "asked": self.asked, "hub_reward": self.hub_reward}
        if not self.waited:
            row["waited"] = False  # on probation: it let a deadline pass
        if self.shielded:
            row["shielded"] = True
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
        BidCandidate(c.node, c.reward.total, c.reward.sla_risk_cost, c.reward.qos)
        if c.reward is not None
        else BidCandidate(c.node)
        for c in choice.explanation.candidates
    ]
    if not found or found[0].node != choice.node:
        found.insert(0, BidCandidate(choice.node))
    return found


class BidSilence:
    """The nodes on probation: their local policy let a bid deadline pass and has not answered
    within one since. Keyed by node and boot (a restarted agent starts afresh); forgotten on an
    answer in time, or ``FORGET_AFTER_S`` after the last miss (a node that is gone)."""

    FORGET_AFTER_S = 600.0

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._missed_at: dict[tuple[str, str], float] = {}
        self._clock = clock
        # Asks whose round ended before they did: referenced until their deadline ends them.
        self._late: set[asyncio.Task[BidV1 | None]] = set()

    def on_probation(self, node: str, boot_id: str) -> bool:
        """Whether rounds should not wait for this node's bid."""
        return (node, boot_id) in self._missed_at

    def missed(self, node: str, boot_id: str) -> None:
        """The node let a deadline pass."""
        now = self._clock()
        self._missed_at[(node, boot_id)] = now
        stale = [key for key, at in self._missed_at.items() if now - at > self.FORGET_AFTER_S]
        for key in stale:
            del self._missed_at[key]

    def answered(self, node: str, boot_id: str) -> None:
        """The node answered within a deadline."""
        self._missed_at.pop((node, boot_id), None)

    def keep(self, task: asyncio.Task[BidV1 | None]) -> None:
        """Hold an ask its round did not wait for until it ends (answer or deadline)."""
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    def __len__(self) -> int:
        return len(self._missed_at)


async def _ask(
    hub: NodeDirectory, node: str, request: BidRequestV1, deadline_s: float, silence: BidSilence | None
) -> BidV1 | None:
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
    except TimeoutError:  # silent past the deadline: on probation until it answers in time
        if silence is not None:
            silence.missed(node, live.boot_id)
        return None
    except Exception:  # no responders, no connection: fall back to the hub's estimate
        return None
    if silence is not None:
        silence.answered(node, live.boot_id)
    return bid if bid.request_id == request.request_id else None


async def _gather_bids(
    hub: NodeDirectory,
    nodes: list[str],
    request: BidRequestV1,
    deadline_s: float,
    silence: BidSilence | None,
) -> tuple[list[BidV1 | None], set[str]]:
    """Every node asked at once; the round waits for the nodes not on probation (each bounded by
    the deadline), and takes of the others only the answers already in by then. Their asks go on
    in the background until the deadline, so that an answer in time ends their probation.
    Returns the bids (None: no answer in time) and the nodes not waited for."""
    if silence is None:
        return list(await asyncio.gather(*(_ask(hub, n, request, deadline_s, None) for n in nodes))), set()
    probation = {
        node for node in nodes if (live := hub.nodes.get(node)) and silence.on_probation(node, live.boot_id)
    }
    if not probation:
        return list(await asyncio.gather(*(_ask(hub, n, request, deadline_s, silence) for n in nodes))), set()
    tasks = {n: asyncio.ensure_future(_ask(hub, n, request, deadline_s, silence)) for n in nodes}
    try:
        awaited = [tasks[n] for n in nodes if n not in probation]
        if awaited:
            await asyncio.gather(*awaited)
        else:
            await asyncio.sleep(0)  # let the requests go out: an answer never comes back sooner
    except BaseException:  # cancelled (the hub stops): no ask outlives its round unreferenced
        for task in tasks.values():
            task.cancel()
        raise
    results: list[BidV1 | None] = []
    for node in nodes:
        task = tasks[node]
        if task.done():
            results.append(task.result())
        else:
            silence.keep(task)
            results.append(None)
    return results, probation


async def run_bid_round(
    hub: NodeDirectory,
    workload_id: str,
    spec: WorkloadSpec,
    choice: ReplicaChoice,
    *,
    deadline_ms: float,
    silence: BidSilence | None = None,
    shield_margin: float | None = None,
) -> BidOutcome | None:
    """The node this replica should go to, or None when no candidate runs a local policy.

    ``silence``: the nodes on probation, kept across rounds (None: every node is waited for);
    ``shield_margin``: the SLA shield's margin (None: no shield), see :func:`decide`."""
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
    bids, not_waited = await _gather_bids(hub, [c.node for c in asked], request, deadline_ms / 1000, silence)
    by_node = {c.node: bid for c, bid in zip(asked, bids, strict=True)}
    return decide(candidates, by_node, not_waited, choice.node, shield_margin=shield_margin)


def decide(
    candidates: list[BidCandidate],
    by_node: dict[str, BidV1 | None],
    not_waited: set[str],
    chosen: str,
    *,
    shield_margin: float | None = None,
) -> BidOutcome:
    """The round's winner: the best of the accepting bids (less each node's learned risk cost)
    and, for the nodes not asked or silent, the hub's estimates; ``chosen`` (the scheduler's
    choice) when nothing can be compared. ``by_node``: the nodes asked and their bids.
    ``shield_margin``: a candidate still in the running whose hub QoS term is more than this
    below the best such candidate's is taken out (None: no shield)."""
    rows = []
    hows = []
    for candidate in candidates:
        bid = by_node.get(candidate.node)
        asked_it = candidate.node in by_node
        row = BidRow(candidate.node, asked=asked_it, hub_reward=candidate.hub_reward, bid=bid)
        row.waited = candidate.node not in not_waited
        if bid is not None:
            # The replica runs with its requested quotas, so compare what the node expects of
            # those; the chosen bin's score over-values empty nodes (docs/bench-policy.md).
            as_placed = bid.score_requested if bid.score_requested is not None else bid.score
            row.value, how = (as_placed - candidate.risk_cost, "bid") if bid.accept else (None, "")
        else:
            row.value, how = candidate.hub_reward, "hub-estimate"
        rows.append(row)
        hows.append(how)
    if shield_margin is not None:
        in_running = [row.value is not None for row in rows]
        masks = unsafe_of([c.qos for c in candidates], in_running, shield_margin)
        for row, masked in zip(rows, masks, strict=True):
            if masked:
                row.value, row.shielded = None, True
    best: tuple[float, str, str] | None = None
    for row, how in zip(rows, hows, strict=True):
        if row.value is not None and (best is None or row.value > best[0]):
            best = (row.value, row.node, how)
    if best is None:
        return BidOutcome(winner=chosen, decided_by="scheduler", rows=rows)
    return BidOutcome(winner=best[1], decided_by=best[2], rows=rows)
