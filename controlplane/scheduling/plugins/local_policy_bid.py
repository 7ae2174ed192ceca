"""LocalPolicyBid: the edge agents' bid round, emulated in-process with the shipped int8 model.

In the live system the hub asks the candidate nodes' agents for a bid on each replica
(``controlplane/hub/bidding.py``): every agent runs its local policy
(``edgeplane_contract.policy.runtime.LocalPolicy``) on its own node state, the offer and its objective
weights (w3 raised on battery, ``reward.energy_weight``). A *decline* takes the node out; an
*accept* values the node at the bid's score (the model's predicted reward ``q`` of the bin it
chose); a node that does not answer is valued at the hub's own reward estimate.

This plugin does the same for every candidate node in one cycle, without the network: it builds
each candidate's :class:`~edgeplane_contract.policy.features.NodeView` from the scheduler's node table
(capacity, allocation, MIG room, replicas, neighbours' sensitivity, power figures, battery), the
:class:`~edgeplane_contract.policy.features.Offer` from the request, and the node's effective weights;
then runs the model **once per decision** on the batch of all candidates (the model's batch
dimension is dynamic, and its static quantisation makes a batched row equal the same row run
alone). Scores:

* a node whose policy accepts scores the model's ``q`` of its chosen bin (reward units, mapped
  onto [0, 100] by the same fixed affine map as ``MultiObjective``);
* a node whose policy declines is excluded from selection (``framework.STATE_EXCLUDED``);
* if every candidate declines, all of them score the exact reward R (the ``edgeplane`` score),
  as the live hub falls back to its own estimates when no bid comes.

The placement still uses the request's quotas (the hub does the same with the winning bid: the
bin's quotas are the agent's business). The plugin subclasses ``MultiObjective``, so the
scheduler's reward configuration, battery awareness and explanations (the reward terms of every
candidate) stay those of the ``edgeplane`` profile.

onnxruntime is imported only when a profile naming this plugin is loaded; nothing here imports
torch. A missing or incompatible model is a ``ConfigError`` when the profile is loaded (the
registry's validator), never a silent fallback: a benchmark of the learned policy must run it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeplane_contract.objective import RewardConfig, RewardInputs, energy_weight, reward_terms
from edgeplane_contract.policy.actions import (
    DECLINE,
    DECLINE_REWARD,
    N_BINS,
    action_mask,
    requested_bin,
    select_from_logits,
)
from edgeplane_contract.policy.features import NodeView, Offer, features, mig_free_from_occupancy
from edgeplane_contract.resources import NODE_TYPES

from controlplane.scheduling.actions import Candidates
from controlplane.scheduling.framework import (
    STATE_EXCLUDED,
    BoolArray,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
)
from controlplane.scheduling.model import WorkloadRequest
from controlplane.scheduling.plugins.args import decode_args
from controlplane.scheduling.plugins.multi_objective import STATE_TERMS, MultiObjective, MultiObjectiveArgs
from controlplane.scheduling.shield import unsafe

if TYPE_CHECKING:
    from edgeplane_contract.policy.runtime import LocalPolicy

__all__ = [
    "BID_SCORES",
    "NAME",
    "STATE_BIDS",
    "Bids",
    "LocalPolicyBid",
    "LocalPolicyBidArgs",
    "load_policy",
    "new",
    "node_views",
    "offer_of",
    "validate",
]

NAME = "LocalPolicyBid"
STATE_BIDS = "LocalPolicyBid/bids"
BID_SCORES = ("chosen", "requested")


@dataclass(frozen=True, slots=True)
class LocalPolicyBidArgs:
    """``model``: the int8 ONNX model (its ``metadata.json`` next to it; empty: the shipped one).

    ``reward``: the profile's reward block: the base weights w1..w4 and the battery rule the
    agents apply to w3, and the exact reward used when every candidate declines.
    ``transfer``: tell each node's policy the scheduler's estimate of the time to fetch the
    input data to it (the policy was trained with it; the live ``OfferSpec`` does not carry it
    yet). ``bid_score``: what an accepting node scores: ``requested`` (default), its ``q`` of the
    bin that matches the placement actually made (1x CPU, 1x memory, the requested accelerator;
    what the live hub compares, ``BidV1.score_requested``), or ``chosen``, its ``q`` of the bin
    it chose (the first design; it over-values empty nodes, see docs/bench-policy.md).
    ``score_floor``/``score_ceiling``: the normalisation range, as ``MultiObjective``.
    ``shield_margin``: the hub's SLA shield over the bids (None: off): an accepting node whose
    QoS term, as the hub estimates it (the learned interference and SLA-miss risk), is more than
    this below the best accepting node's is masked out (:func:`controlplane.scheduling.shield.unsafe`).
    """

    model: str = ""
    reward: dict[str, Any] = field(default_factory=dict)
    transfer: bool = True
    bid_score: str = "requested"
    score_floor: float = -3.0
    score_ceiling: float = 1.0
    shield_margin: float | None = None


@dataclass(slots=True)
class Bids:
    """One cycle's bids, aligned with the candidates: what the agents would have answered."""

    accept: BoolArray
    action: IntArray
    score: FloatArray
    weights_energy: FloatArray
    fallback: bool


# One LocalPolicy (and onnxruntime session) per model file version, shared by every scheduler.
_POLICIES: dict[tuple[str, int, int], LocalPolicy] = {}


def load_policy(model: str = "") -> LocalPolicy:
    """The local policy for ``model`` (empty: the shipped int8 model), loaded once.

    Raises ValueError with the reason when the model or its metadata is missing, corrupt,
    incompatible with this runtime's features or action space, or onnxruntime is unavailable.
    """
    from edgeplane_contract.policy.errors import ModelLoadError
    from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH, LocalPolicy

    path = Path(model) if model else DEFAULT_MODEL_PATH
    try:
        info = path.stat()
    except OSError:
        raise ValueError(f"{NAME}: model file {str(path)!r} not found") from None
    key = (str(path.resolve()), info.st_mtime_ns, info.st_size)
    cached = _POLICIES.get(key)
    if cached is not None:
        return cached
    try:
        session, metadata = LocalPolicy._open(path)
    except ModelLoadError as exc:
        raise ValueError(f"{NAME}: local policy model unusable: {exc}") from None
    policy = LocalPolicy(path=path, session=session, metadata=metadata, fallback_reason=None)
    _POLICIES[key] = policy
    return policy


def validate(args: Mapping[str, Any]) -> None:
    """The registry's profile-load check: args decode, reward block parses, the model loads."""
    decoded = decode_args(LocalPolicyBidArgs, args, NAME)
    _check(decoded)
    RewardConfig.from_dict(decoded.reward)
    load_policy(decoded.model)


def _check(args: LocalPolicyBidArgs) -> None:
    if not isinstance(args.model, str):
        raise ValueError(f"{NAME}.model: must be a path string")
    if args.bid_score not in BID_SCORES:
        raise ValueError(f"{NAME}.bid_score: must be one of {', '.join(BID_SCORES)}")
    margin = args.shield_margin
    if margin is not None and (
        isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0.0 <= margin < float("inf")
    ):
        raise ValueError(f"{NAME}.shield_margin: must be a finite number >= 0, or absent (no shield)")


def offer_of(request: WorkloadRequest) -> Offer:
    """The offer a node's local policy scores for ``request``, as the agent builds it from a bid
    request (``edge_agent.bids.Bids.on_bid``)."""
    res = request.resources
    return Offer.from_request(
        kind=request.kind,
        cpu=res.cpu,
        memory=res.memory,
        gpu=res.gpu,
        mig=res.mig,
        sla_s=request.sla_latency_s,
        runtime_s=request.expected_runtime_s,
        priority=request.priority,
    )


def node_views(handle: Handle, cand: Candidates, x: RewardInputs) -> list[NodeView]:
    """Each candidate node as its agent sees itself, from the scheduler's node table and the
    candidates' reward inputs (shared with the learning environment, ``controlplane.learn``)."""
    t = handle.nodes
    rows = cand.rows
    power = handle.power
    gpus_free = t.free_whole_gpus()[rows].tolist()
    mig_rows = t.mig_gpu[rows]
    occ = t.mig_occ[rows]
    comp = t.mig_comp[rows]
    types = t.node_type[rows].tolist()
    battery = t.battery_pct[rows].tolist()
    views = []
    for k, (
        ntype,
        cap,
        alloc,
        mcap,
        malloc,
        gcount,
        gused,
        reps,
        sens,
        io,
        on_bat,
        idle,
        peak,
    ) in enumerate(
        zip(
            types,
            x.cpu_cap.tolist(),
            x.cpu_alloc.tolist(),
            x.mem_cap.tolist(),
            x.mem_alloc.tolist(),
            x.gpu_count.tolist(),
            x.gpu_used.tolist(),
            x.replicas.tolist(),
            x.sens_sum.tolist(),
            x.io_count.tolist(),
            x.on_battery.tolist(),
            x.idle_w.tolist(),
            x.max_w.tolist(),
            strict=True,
        )
    ):
        type_name = NODE_TYPES[ntype]
        spec = power.spec(type_name)
        mig_free: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
        if mig_rows[k].any():
            mig_free = _mig_free(
                tuple((int(o), int(c)) for o, c, m in zip(occ[k], comp[k], mig_rows[k], strict=True) if m)
            )
        pct = battery[k]
        views.append(
            NodeView(
                node_type=type_name,
                cpu_capacity=cap,
                cpu_allocated=alloc,
                memory_capacity=mcap,
                memory_allocated=malloc,
                gpu_count=int(gcount),
                gpus_free=gpus_free[k],
                gpu_used=gused,
                mig_free=mig_free,
                replicas=int(reps),
                sensitivity_sum=sens,
                io_heavy_replicas=int(io),
                on_battery=on_bat > 0,
                battery_percent=None if pct != pct else pct,
                idle_w=idle,
                max_w=peak,
                cpu_dynamic_w_per_core=(spec.max_w - spec.idle_w) / max(cap, 1e-9),
                gpu_dynamic_w_per_unit=spec.gpu_max_w - spec.gpu_idle_w,
                power_ref_w=x.power_ref_w,
            )
        )
    return views


@functools.lru_cache(maxsize=4096)
def _mig_free(occupancy: tuple[tuple[int, int], ...]) -> tuple[int, int, int, int, int]:
    return mig_free_from_occupancy(occupancy)


class LocalPolicyBid(MultiObjective):
    name = NAME

    def __init__(self, args: LocalPolicyBidArgs, handle: Handle) -> None:
        _check(args)
        super().__init__(
            MultiObjectiveArgs(
                reward=dict(args.reward), score_floor=args.score_floor, score_ceiling=args.score_ceiling
            ),
            handle,
        )
        self.policy = load_policy(args.model)
        self.transfer = args.transfer
        self.bid_score = args.bid_score
        self.shield_margin = None if args.shield_margin is None else float(args.shield_margin)
        # Counters over the scheduler's lifetime (not per-cycle state): for benchmarks.
        self.stats = {"decisions": 0, "candidates": 0, "declines": 0, "fallbacks": 0, "shielded": 0}

    def _offer(self, request: WorkloadRequest) -> Offer:
        return offer_of(request)

    def node_views(self, cand: Candidates, x: RewardInputs) -> list[NodeView]:
        """Each candidate node as its agent sees itself (from the scheduler's node table)."""
        return node_views(self.handle, cand, x)

    def node_weights(self, x: RewardInputs) -> FloatArray:
        """Each candidate's effective w3 under the profile's battery rule (as the agents apply it)."""
        w3: FloatArray = np.round(energy_weight(self.config, x.on_battery, x.battery_pct), 6)
        return w3

    def bids(self, request: WorkloadRequest, cand: Candidates, x: RewardInputs) -> Bids:
        """Every candidate's bid from one batched model call."""
        n = len(cand)
        offer = self._offer(request)
        views = self.node_views(cand, x)
        w = self.config.weights
        w3 = self.node_weights(x)
        transfers = x.transfer_s.tolist() if self.transfer else [0.0] * n
        rows = []
        allowed = []
        for view, e, transfer in zip(views, w3.tolist(), transfers, strict=True):
            offer.transfer_s = transfer
            rows.append(features(view, offer, (w.util, w.qos, e, w.penalty)))
            allowed.append(action_mask(view, offer))
        q, logits = self.policy.outputs(np.stack(rows))
        mask = np.stack(allowed)
        action = select_from_logits(logits, mask)
        accept = action != DECLINE
        value = q[np.arange(n), np.minimum(action, N_BINS - 1)]
        if self.bid_score == "requested":
            # As a live bid's score_requested: that bin's q where it fits, else the chosen bin's.
            as_requested = requested_bin(offer)
            value = np.where(mask[:, as_requested], q[:, as_requested], value)
        score = np.where(accept, value, DECLINE_REWARD)
        return Bids(accept, action, score.astype(np.float64), w3, fallback=not accept.any())

    def score(self, state: CycleState, request: WorkloadRequest, cand: Candidates) -> FloatArray:
        x = self.inputs(state, request, cand)
        terms = reward_terms(x, self.config)
        state.write(STATE_TERMS, terms)
        if len(cand) == 0:
            return terms.total
        bids = self.bids(request, cand, x)
        state.write(STATE_BIDS, bids)
        self.stats["decisions"] += 1
        self.stats["candidates"] += len(cand)
        self.stats["declines"] += int((~bids.accept).sum())
        if bids.fallback:
            # No node accepts: the hub's own estimate decides (the edgeplane reward).
            self.stats["fallbacks"] += 1
            return terms.total
        excluded = ~bids.accept
        if self.shield_margin is not None:
            masked = unsafe(terms.qos, bids.accept, self.shield_margin)
            self.stats["shielded"] += int(masked.sum())
            excluded = excluded | masked
        state.write(STATE_EXCLUDED, excluded)
        # The hub's correction of what the agents' model cannot know: the SLA-miss risk learned
        # from the fleet's outcomes (0 unless the reward weighs it; see sla_risk.py).
        corrected: FloatArray = bids.score - terms.sla_risk_cost
        return corrected


def new(args: Mapping[str, Any], handle: Handle) -> LocalPolicyBid:
    return LocalPolicyBid(decode_args(LocalPolicyBidArgs, args, NAME), handle)
