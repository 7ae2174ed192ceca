"""The environment's observation: per node slot, what the live scheduler and its agents see.

Built at each decision from the scheduler alone (never the simulator): for every candidate node
of the cycle (the nodes the profile's Filter plugins pass, as the cycle sampled them),

* the local policy's feature vector (:func:`edgeplane_contract.policy.features.features`) of the
  node as its agent sees itself (:func:`~controlplane.scheduling.plugins.local_policy_bid.node_views`),
  the offer and the node's effective weights (w3 raised on battery), as the agents' bids compute it;
* the hub's one-step reward terms of the placement (``util``, ``qos``, ``energy``, ``penalty``,
  :func:`edgeplane_contract.objective.reward_terms` under the profile's current reward, the
  learned interference estimate included);
* the profile's Score total over its largest possible value (-1 where a plugin excluded the node);
* 1 (a candidate).

Rows of the node table are the slots (padding after the fleet, zeros where a node is no
candidate); a few fleet-wide values follow. Every value is clipped to :data:`BOUND`.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from edgeplane_contract.objective import energy_weight, reward_terms
from edgeplane_contract.policy.features import FEATURE_NAMES, N_FEATURES, write_features

from controlplane.scheduling.cycle import Choice
from controlplane.scheduling.framework import MAX_NODE_SCORE
from controlplane.scheduling.plugins.local_policy_bid import node_views, offer_of
from controlplane.scheduling.plugins.multi_objective import MultiObjective, MultiObjectiveArgs
from controlplane.scheduling.scheduler import Scheduler

__all__ = ["BOUND", "GLOBAL_COLUMNS", "NODE_COLUMNS", "Observer", "candidate_rows"]

NODE_COLUMNS: tuple[str, ...] = (
    *FEATURE_NAMES,
    "hub.util",
    "hub.qos",
    "hub.energy",
    "hub.penalty",
    "hub.score",
    "candidate",
)
GLOBAL_COLUMNS: tuple[str, ...] = (
    "queue.workloads_log",
    "request.replicas_log",
    "request.replica_frac",
    "request.gang",
    "fleet.candidates_frac",
    "fleet.ready_frac",
)
BOUND = 8.0
"""Every observed value lies in [-BOUND, BOUND] (the features are scaled to about [0, 4])."""

FloatObs = npt.NDArray[np.float32]
BoolMask = npt.NDArray[np.bool_]


class Observer:
    """Builds observations and masks for fleets of up to ``max_nodes`` nodes."""

    def __init__(self, max_nodes: int) -> None:
        if max_nodes < 1:
            raise ValueError("max_nodes must be at least 1")
        self.max_nodes = max_nodes
        self.width = len(NODE_COLUMNS)
        self.size = max_nodes * self.width + len(GLOBAL_COLUMNS)

    def empty(self) -> tuple[FloatObs, BoolMask]:
        """No decision pending (the episode ended): zeros, and only the defer action."""
        mask = np.zeros(self.max_nodes + 1, dtype=np.bool_)
        mask[self.max_nodes] = True
        return np.zeros(self.size, dtype=np.float32), mask

    def observe(self, sched: Scheduler, choice: Choice) -> tuple[FloatObs, BoolMask]:
        """The observation and action mask of ``choice`` (a cycle's scored candidates)."""
        obs, mask = self.empty()
        rows, fleet = candidate_rows(sched, choice)
        nodes = obs[: self.max_nodes * self.width].reshape(self.max_nodes, self.width)
        slots = choice.cand.rows
        nodes[slots] = rows
        mask[slots] = True
        obs[self.max_nodes * self.width :] = fleet
        np.clip(obs, -BOUND, BOUND, out=obs)
        return obs, mask


def candidate_rows(sched: Scheduler, choice: Choice) -> tuple[FloatObs, FloatObs]:
    """One row of :data:`NODE_COLUMNS` per candidate of ``choice`` (in ``choice.cand`` order) and
    the :data:`GLOBAL_COLUMNS` values, unclipped: what :class:`Observer` puts in the candidates'
    slots, and what a learned chooser scores with no slot limit (any fleet size)."""
    cand, request = choice.cand, choice.request
    cfg = sched.plugins.reward_config
    # MultiObjective computes the reward inputs as the edgeplane profile scores them.
    scorer = MultiObjective(MultiObjectiveArgs(), sched)
    scorer.config = cfg
    x = scorer.inputs(choice.state, request, cand)
    terms = reward_terms(x, cfg)
    w = cfg.weights
    w3 = np.round(energy_weight(cfg, x.on_battery, x.battery_pct), 6).tolist()
    offer = offer_of(request)
    top = MAX_NODE_SCORE * max(sum(weight for _, weight, _ in sched.plugins.scorers), 1e-9)
    score = np.where(np.isfinite(choice.ranking), choice.ranking / top, -1.0)
    transfers = x.transfer_s.tolist()
    rows = np.zeros((len(cand), len(NODE_COLUMNS)), dtype=np.float32)
    for k, view in enumerate(node_views(sched, cand, x)):
        offer.transfer_s = transfers[k]
        write_features(view, offer, (w.util, w.qos, w3[k], w.penalty), rows[k, :N_FEATURES])
        rows[k, N_FEATURES:] = (
            terms.util[k],
            terms.qos[k],
            terms.energy[k],
            terms.penalty[k],
            score[k],
            1.0,
        )
    table = sched.nodes
    n = max(len(table), 1)
    fleet = np.array(
        (
            math.log1p(len(sched.queue)) / 8.0,
            math.log1p(request.replicas) / 4.0,
            choice.replica / max(request.replicas, 1),
            1.0 if request.gang else 0.0,
            len(cand) / n,
            float(np.count_nonzero(table.ready[: len(table)])) / n,
        ),
        dtype=np.float32,
    )
    return rows, fleet
