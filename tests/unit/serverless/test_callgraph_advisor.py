"""Call-graph learning from co-occurrence of episodes."""

from __future__ import annotations

from controlplane.serverless.keepalive import CallGraphAdvisor, CallGraphConfig


def test_a_function_usually_followed_by_another_learns_it_as_a_successor() -> None:
    adv = CallGraphAdvisor(CallGraphConfig(window_s=60.0, min_support=3))
    returned = []
    for k in range(6):
        t = 3600.0 * k
        returned.append(adv.observe_invocation("A", t))
        adv.observe_invocation("B", t + 10.0)
        adv.observe_invocation("C", t + 1800.0)  # unrelated, half an hour later
    assert returned[:3] == [(), (), ()]  # fewer than min_support co-occurrences so far
    assert returned[3:] == [("B",), ("B",), ("B",)]
    assert adv.successors("C", 6 * 3600.0) == ()


def test_a_successor_that_is_frequent_anyway_is_not_learned() -> None:
    adv = CallGraphAdvisor(CallGraphConfig(window_s=60.0, min_lift=5.0))
    events = [(90.0 * i, "B") for i in range(223)]  # B starts an episode every 90 s regardless of A
    events += [(1000.0 * k + 5.0, "A") for k in range(20)]
    for t, fid in sorted(events):
        adv.observe_invocation(fid, t)
    assert adv.co_occurrences("A", "B") >= 10  # B does follow A often...
    assert "B" not in adv.successors("A", 20_000.0)  # ...but no more than it follows anything


def test_invocations_inside_an_episode_are_ignored() -> None:
    adv = CallGraphAdvisor(CallGraphConfig(window_s=60.0, min_support=2))
    for k in range(3):
        t = 3600.0 * k
        adv.observe_invocation("A", t)
        adv.observe_invocation("A", t + 5.0)  # same episode as the line above
        adv.observe_invocation("B", t + 20.0)
    assert adv.successors("A", 3 * 3600.0) == ("B",)
    assert adv.observe_invocation("A", 3 * 3600.0) == ("B",)
    assert adv.observe_invocation("A", 3 * 3600.0 + 1.0) == ()  # not an episode start
