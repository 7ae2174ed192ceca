"""Which nodes' bids a round does not wait for: those that let a deadline pass, per boot."""

from __future__ import annotations

from controlplane.hub.bidding import BidSilence


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_node_that_let_a_deadline_pass_is_on_probation_until_it_answers_in_time():
    silence = BidSilence()
    assert not silence.on_probation("n1", "boot-a")
    silence.missed("n1", "boot-a")
    assert silence.on_probation("n1", "boot-a")
    silence.answered("n1", "boot-a")
    assert not silence.on_probation("n1", "boot-a") and len(silence) == 0


def test_a_restarted_agent_starts_afresh():
    silence = BidSilence()
    silence.missed("n1", "boot-a")
    assert not silence.on_probation("n1", "boot-b")


def test_nodes_silent_for_long_are_forgotten_when_another_misses():
    clock = Clock()
    silence = BidSilence(clock=clock)
    silence.missed("gone", "boot-a")
    clock.now = BidSilence.FORGET_AFTER_S + 1
    silence.missed("n2", "boot-c")
    assert not silence.on_probation("gone", "boot-a") and silence.on_probation("n2", "boot-c")
    assert len(silence) == 1
