"""The bid round's candidates are read from the scheduler's typed explanation."""

from __future__ import annotations

import pytest

from edgeplane_contract.messages import BidV1
from edgeplane_contract.objective import RewardBreakdown

from controlplane.hub.bidding import BidCandidate, candidates_of, decide
from controlplane.hub.placement import ReplicaChoice
from controlplane.scheduling.explanation import (
    CandidateExplanation,
    CandidateExtras,
    Explanation,
    MaskReport,
    NodeCounts,
    PlacementExplanation,
    ReplicaExplanation,
)
from controlplane.scheduling.model import Assignment


def candidate(node: str, reward: float | RewardBreakdown | None = None) -> CandidateExplanation:
    """A candidate with no reward estimate, a total alone, or a whole breakdown."""
    if isinstance(reward, float):
        reward = RewardBreakdown(reward, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    extras = () if reward is None else (CandidateExtras(reward),)
    return CandidateExplanation(node, "c", 50.0, Assignment(cpu=1, memory=1), {}, extras)


def choice(node: str, chosen: CandidateExplanation, *alternatives: CandidateExplanation) -> ReplicaChoice:
    replica = ReplicaExplanation(
        0, MaskReport(3, 0, 3), NodeCounts(3, 3, 3), chosen=chosen, alternatives=alternatives
    )
    explanation = PlacementExplanation(Explanation(replicas=(replica,)), replica)
    return ReplicaChoice(replica=0, node=node, cluster="c", explanation=explanation)


def test_the_choice_comes_first_then_its_alternatives_with_the_hubs_reward_estimates():
    found = candidates_of(choice("a", candidate("a", 0.7), candidate("b", 0.5), candidate("c")))
    expected = [BidCandidate("a", 0.7, qos=0.0), BidCandidate("b", 0.5, qos=0.0), BidCandidate("c", None)]
    assert found == expected


def test_without_an_explanation_the_choice_alone_is_a_candidate():
    assert candidates_of(ReplicaChoice(replica=0, node="a", cluster="c")) == [BidCandidate("a")]


def test_the_choice_is_put_first_when_the_explanation_chose_another_node():
    found = candidates_of(choice("a", candidate("z", 0.2)))
    assert found == [BidCandidate("a"), BidCandidate("z", 0.2, qos=0.0)]


def _bid(node: str, score: float, *, accept: bool = True) -> BidV1:
    return BidV1(request_id="r", node=node, accept=accept, action=0, score=score, score_requested=score)


def test_a_candidate_carries_what_the_learned_sla_risk_takes_off_its_reward():
    risky = candidate("a", RewardBreakdown(0.4, 0, 0, 0, 0, 0, 0, 0.3))
    assert candidates_of(choice("a", risky)) == [BidCandidate("a", 0.4, 0.3, 0.0)]
    assert RewardBreakdown(0.4, 0, 0, 0, 0, 0, 0, 0.3).to_dict()["sla_risk_cost"] == 0.3
    assert "sla_risk_cost" not in RewardBreakdown(0.4, 0, 0, 0, 0, 0, 0).to_dict()


def test_the_round_lowers_each_bid_by_its_nodes_learned_risk_cost():
    candidates = [
        BidCandidate("busy", 0.5, 0.3),
        BidCandidate("quiet", 0.4, 0.0),
        BidCandidate("silent", 0.1),
    ]
    bids: dict[str, BidV1 | None] = {"busy": _bid("busy", 0.6), "quiet": _bid("quiet", 0.45), "silent": None}
    outcome = decide(candidates, bids, set(), "busy")
    # Raw, the busy node's bid wins (0.6 > 0.45); less its risk cost it is 0.3.
    assert (outcome.winner, outcome.decided_by) == ("quiet", "bid")
    assert [row.value for row in outcome.rows] == pytest.approx([0.3, 0.45, 0.1])
    without = decide([BidCandidate("busy", 0.5), BidCandidate("quiet", 0.4)], bids, set(), "busy")
    assert without.winner == "busy"
    declined = decide(candidates[:1], {"busy": _bid("busy", 0.6, accept=False)}, set(), "busy")
    assert (declined.winner, declined.decided_by) == ("busy", "scheduler")


def test_the_sla_shield_takes_out_a_bid_whose_hub_qos_is_far_below_the_best():
    # The agent on "packed" bids highest (its model sees room and an efficient node), but the hub
    # learned that replicas there miss their SLA: its QoS term is 0.5 below the quiet node's.
    candidates = [
        BidCandidate("packed", 0.5, 0.0, -0.6),
        BidCandidate("quiet", 0.4, 0.0, -0.1),
        BidCandidate("near", 0.3, 0.0, -0.12),
        BidCandidate("silent", 0.45, 0.0, -0.9),  # no answer: valued at the hub's estimate
    ]
    bids: dict[str, BidV1 | None] = {
        "packed": _bid("packed", 0.9),
        "quiet": _bid("quiet", 0.2),
        "near": _bid("near", 0.35),
        "silent": None,
    }
    shielded = decide(candidates, bids, set(), "packed", shield_margin=0.05)
    assert (shielded.winner, shielded.decided_by) == ("near", "bid")  # within 0.05 of the best QoS
    assert [row.shielded for row in shielded.rows] == [True, False, False, True]
    assert shielded.rows[0].to_dict()["shielded"] is True and shielded.rows[0].value is None
    assert "shielded" not in shielded.rows[1].to_dict()
    assert decide(candidates, bids, set(), "packed").winner == "packed"  # no shield: the bids decide
    # The best QoS among those still in the running is never taken out: a declining node with a
    # better QoS sets no bar.
    bids["quiet"] = _bid("quiet", 0.2, accept=False)
    assert decide(candidates, bids, set(), "packed", shield_margin=0.0).winner == "near"
    # Without hub estimates there is nothing to shield by.
    bare = [BidCandidate("packed"), BidCandidate("quiet")]
    assert decide(bare, {"packed": _bid("packed", 0.9), "quiet": _bid("quiet", 0.2)}, set(), "quiet",
                  shield_margin=0.0).winner == "packed"  # fmt: skip


def test_a_candidate_carries_the_hubs_qos_term_for_the_shield():
    entry = candidate("a", RewardBreakdown(0.4, 0, -0.25, 0, 0, 0, 0, 0.3))
    assert candidates_of(choice("a", entry)) == [BidCandidate("a", 0.4, 0.3, -0.25)]
