"""The hub's pace for a registration storm (``bus.admission.AdmissionPace``): turns spaced at
a bounded admission rate, after the ones in flight, never further than a bound."""

from __future__ import annotations

import pytest

from controlplane.bus.admission import AdmissionPace


def test_turns_come_after_those_in_flight_one_slot_of_the_rate_apart() -> None:
    pace = AdmissionPace(rate=100.0)
    turns = [pace.turn(10.0, in_flight=50) for _ in range(4)]
    assert turns == pytest.approx([0.5, 0.51, 0.52, 0.53])


def test_a_storm_is_spread_over_the_time_the_hub_needs_for_it() -> None:
    pace = AdmissionPace(rate=200.0)
    turns = [pace.turn(0.0, in_flight=256) for _ in range(10_000)]
    assert turns == sorted(turns)
    # 10,256 registrations at 200/s: the last turn about 51 s away, none bunched together.
    assert turns[-1] == pytest.approx((256 + 9_999) / 200.0)


def test_later_turns_never_reuse_slots_given_earlier() -> None:
    pace = AdmissionPace(rate=10.0)
    first = pace.turn(0.0, in_flight=0)
    second = pace.turn(0.05, in_flight=0)  # asked 50 ms later: still after the first's slot
    assert first == 0.0 and second == pytest.approx(0.1 - 0.05)


def test_a_turn_is_never_further_than_the_bound() -> None:
    pace = AdmissionPace(rate=20.0, max_wait_s=30.0)
    assert max(pace.turn(0.0, in_flight=1000) for _ in range(100)) == 30.0


def test_a_rate_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        AdmissionPace(rate=0.0)
