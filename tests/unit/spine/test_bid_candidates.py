"""The bid round's candidates are read from the scheduler's typed explanation."""

from __future__ import annotations

from edgeplane_contract.objective import RewardBreakdown

from controlplane.hub.bidding import BidCandidate, candidates_of
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


def candidate(node: str, reward: float | None = None) -> CandidateExplanation:
    extras = (
        () if reward is None else (CandidateExtras(RewardBreakdown(reward, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),)
    )
    return CandidateExplanation(node, "c", 50.0, Assignment(cpu=1, memory=1), {}, extras)


def choice(node: str, chosen: CandidateExplanation, *alternatives: CandidateExplanation) -> ReplicaChoice:
    replica = ReplicaExplanation(
        0, MaskReport(3, 0, 3), NodeCounts(3, 3, 3), chosen=chosen, alternatives=alternatives
    )
    explanation = PlacementExplanation(Explanation(replicas=(replica,)), replica)
    return ReplicaChoice(replica=0, node=node, cluster="c", explanation=explanation)


def test_the_choice_comes_first_then_its_alternatives_with_the_hubs_reward_estimates():
    found = candidates_of(choice("a", candidate("a", 0.7), candidate("b", 0.5), candidate("c")))
    assert found == [BidCandidate("a", 0.7), BidCandidate("b", 0.5), BidCandidate("c", None)]


def test_without_an_explanation_the_choice_alone_is_a_candidate():
    assert candidates_of(ReplicaChoice(replica=0, node="a", cluster="c")) == [BidCandidate("a")]


def test_the_choice_is_put_first_when_the_explanation_chose_another_node():
    found = candidates_of(choice("a", candidate("z", 0.2)))
    assert found == [BidCandidate("a"), BidCandidate("z", 0.2)]
