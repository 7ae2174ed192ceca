"""The bid round's candidates are read once from the scheduler's explanation, typed."""

from __future__ import annotations

from controlplane.hub.bidding import BidCandidate, candidates_of
from controlplane.hub.placement import ReplicaChoice


def choice(node: str, explanation: dict) -> ReplicaChoice:
    return ReplicaChoice(replica=0, node=node, cluster="c", explanation=explanation)


def test_the_choice_comes_first_then_its_alternatives_with_the_hubs_reward_estimates():
    found = candidates_of(
        choice(
            "a",
            {
                "chosen": {"node": "a", "reward": {"total": 0.7}},
                "alternatives": [{"node": "b", "reward": {"total": 0.5}}, {"node": "c"}],
            },
        )
    )
    assert found == [BidCandidate("a", 0.7), BidCandidate("b", 0.5), BidCandidate("c", None)]


def test_without_an_explanation_the_choice_alone_is_a_candidate():
    assert candidates_of(choice("a", {})) == [BidCandidate("a")]


def test_malformed_entries_are_skipped_and_the_choice_is_put_first():
    found = candidates_of(
        choice("a", {"chosen": {"node": "z", "reward": {"total": "high"}}, "alternatives": [5, {"x": 1}]})
    )
    assert found == [BidCandidate("a"), BidCandidate("z", None)]
