"""Typed explanations turn into the JSON the store keeps and the API returns, key for key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgeplane_contract.objective import RewardBreakdown

from controlplane.hub.bidding import BidRow
from controlplane.scheduling.explanation import (
    BidRound,
    CandidateExplanation,
    CandidateExtras,
    CycleFailure,
    DecisionScope,
    Explanation,
    MaskReport,
    NodeCounts,
    PlacementExplanation,
    PluginScore,
    PostFilterExplanation,
    ReplicaExplanation,
)
from controlplane.scheduling.model import Assignment, Victim

GiB = 2**30
PROFILE = {
    "name": "t",
    "plugins": ["NodeReady", "NodeResourcesFit", {"name": "NodeResourcesLeastAllocated", "weight": 2}],
}
MASKED = {"NodeResourcesFit: node has too little cpu": 1}


def _assignment(cpu: float) -> dict[str, Any]:
    # The request's default ephemeral storage (1Gi) is held too.
    return {"cpu": cpu, "memory": GiB, "gpus": [], "mig": [], "dpus": [], "ephemeral_storage": GiB}


def _least_allocated(node: str, score: float) -> dict[str, Any]:
    return {
        "node": node,
        "cluster": "default",
        "score": 2 * score,
        "assignment": _assignment(2.0),
        "plugins": {"NodeResourcesLeastAllocated": {"raw": score, "normalized": score, "weight": 2.0}},
    }


# kube's LeastAllocated in integers: b (8 cpu, 256 GiB) keeps 75% cpu, 99% memory -> 87; a -> 74.
SCORED = {
    "replica": 0,
    "actions": {"total": 3, "masked": 1, "remaining": 2, "masked_by": MASKED},
    "nodes": {"total": 3, "feasible": 2, "scored": 2},
    "chosen": _least_allocated("b", 87.0),
    "alternatives": [_least_allocated("a", 74.0)],
}
FAILED = {
    "replica": 0,
    "actions": {
        "total": 3,
        "masked": 3,
        "remaining": 0,
        "masked_by": {"NodeResourcesFit: node has too little cpu": 3},
    },
    "status": "UNSCHEDULABLE_AND_UNRESOLVABLE",
    "reason": "0/3 nodes are available: 3 nodes have too little cpu",
}


@pytest.mark.parametrize(("cpu", "replica"), [(2, SCORED), (16, FAILED)], ids=["scored", "failed"])
def test_a_cycles_explanation_is_this_json(mk, cpu, replica):
    s = mk.scheduler(PROFILE, [mk.cpu_node("a", cpu=4), mk.cpu_node("b", cpu=8), mk.cpu_node("c", cpu=1)])
    d = s.schedule(mk.request("w", cpu=cpu), enqueue=False)
    head = {"profile": "t", "workload": "w", "gang": False, "cluster_plan": None}
    # json.dumps compares the key order too: the stored JSON is the same text.
    assert json.dumps(d.to_dict()["explanation"]) == json.dumps({**head, "replicas": [replica]})
    assert json.dumps(d.explanation.for_replica(0).to_dict()) == json.dumps({**head, **replica})  # as stored


_REWARD = RewardBreakdown(0.5, 0.1, 0.2, 0.3, -0.1, 0.25, 12.0)
_CANDIDATE = CandidateExplanation(
    node="n",
    cluster="c",
    score=10.0,
    assignment=Assignment(cpu=1.0, memory=GiB, ephemeral_storage=GiB),
    plugins={"P": PluginScore(raw=3.0, normalized=5.0, weight=2)},
    extras=(CandidateExtras(_REWARD), CandidateExtras(terms={"bid": "accept", "q": 0.4})),
)
_REPLICA = ReplicaExplanation(
    replica=1,
    mask=MaskReport(4, 1, 3, {"X: no": 1}),
    nodes=NodeCounts(2, 1, 1),
    chosen=_CANDIDATE,
    post_filter=PostFilterExplanation("DefaultPreemption", "n", victims=(Victim("v", 0, "n", 0),)),
)
_DECISION = Explanation(DecisionScope("edgeplane", "w", True), (_REPLICA,), failover_from=("eu",))
_REWARD_JSON = {
    "total": 0.5,
    "R_util": 0.1,
    "R_qos": 0.2,
    "R_energy": 0.3,
    "R_penalty": -0.1,
    "w3_effective": 0.25,
    "predicted_latency_s": 12.0,
}
_CANDIDATE_JSON = {
    "node": "n",
    "cluster": "c",
    "score": 10.0,
    "assignment": _assignment(1.0),
    "plugins": {"P": {"raw": 3.0, "normalized": 5.0, "weight": 2}},
    "reward": _REWARD_JSON,
    "bid": "accept",
    "q": 0.4,
}
_REPLICA_JSON = {
    "replica": 1,
    "actions": {"total": 4, "masked": 1, "remaining": 3, "masked_by": {"X: no": 1}},
    "nodes": {"total": 2, "feasible": 1, "scored": 1},
    "chosen": _CANDIDATE_JSON,
    "alternatives": [],
    "post_filter": {
        "plugin": "DefaultPreemption",
        "node": "n",
        "victims": [{"workload_id": "v", "replica": 0, "node": "n", "priority": 0}],
        "migrations": [],
    },
}
_HEAD_JSON = {"profile": "edgeplane", "workload": "w", "gang": True, "cluster_plan": None}
_BIDS = BidRound("bid", "n", (BidRow("n", asked=True, hub_reward=0.5, value=0.5),))
_BIDS_JSON = {
    "decided_by": "bid",
    "winner": "n",
    "candidates": [{"node": "n", "asked": True, "hub_reward": 0.5, "answered": False, "value": 0.5}],
}

TABLE = [
    ("reward", _REWARD, _REWARD_JSON),
    ("extras-empty", CandidateExtras(), {}),
    ("candidate", _CANDIDATE, _CANDIDATE_JSON),
    ("replica", _REPLICA, _REPLICA_JSON),
    (
        "failed",
        ReplicaExplanation(0, MaskReport(0, 0, 0), failure=CycleFailure("UNSCHEDULABLE", "no")),
        {
            "replica": 0,
            "actions": {"total": 0, "masked": 0, "remaining": 0, "masked_by": {}},
            "status": "UNSCHEDULABLE",
            "reason": "no",
        },
    ),
    ("decision", _DECISION, {**_HEAD_JSON, "replicas": [_REPLICA_JSON], "failover_from": ["eu"]}),
    ("not-explained", Explanation(), {}),
    ("failover-only", Explanation(failover_from=("eu", "us")), {"failover_from": ["eu", "us"]}),
    (
        "placement",
        PlacementExplanation(_DECISION, _REPLICA, _BIDS),
        {**_HEAD_JSON, "failover_from": ["eu"], **_REPLICA_JSON, "bids": _BIDS_JSON},
    ),
    (
        "placement-unmatched",
        _DECISION.for_replica(7),
        {**_HEAD_JSON, "replicas": [_REPLICA_JSON], "failover_from": ["eu"]},
    ),
    ("placement-bids-only", PlacementExplanation(bids=_BIDS), {"bids": _BIDS_JSON}),
]


@pytest.mark.parametrize(("value", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_to_dict(value, expected):
    assert json.dumps(value.to_dict()) == json.dumps(expected)  # key order included


def test_the_reward_is_the_last_explainers_and_candidates_start_with_the_chosen():
    later = RewardBreakdown(0.9, 0, 0, 0, 0, 0, 0)
    both = CandidateExplanation(
        "n", "c", 1.0, Assignment(cpu=1.0, memory=GiB), {}, (CandidateExtras(_REWARD), CandidateExtras(later))
    )
    assert both.reward is later and both.to_dict()["reward"]["total"] == 0.9
    assert PlacementExplanation(_DECISION, _REPLICA).candidates == (_CANDIDATE,)
    assert PlacementExplanation().candidates == ()


def test_a_replica_has_a_chosen_node_with_counts_or_a_failure():
    mask = MaskReport(1, 0, 1)
    with pytest.raises(ValueError):
        ReplicaExplanation(0, mask)
    with pytest.raises(ValueError):
        ReplicaExplanation(0, mask, chosen=_CANDIDATE)
    with pytest.raises(ValueError):
        ReplicaExplanation(0, mask, NodeCounts(1, 1, 1), _CANDIDATE, failure=CycleFailure("X", "y"))
