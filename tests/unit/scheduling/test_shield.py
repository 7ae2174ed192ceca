"""The SLA shield over a learned policy's choices (controlplane/scheduling/shield.py)."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.scheduling.shield import unsafe, unsafe_of


def test_only_eligible_candidates_far_below_the_best_eligible_one_are_masked() -> None:
    qos = np.array([-0.05, -0.10, -0.40, -0.90, 0.0])
    eligible = np.array([True, True, True, False, False])  # the two best-QoS nodes at the end decline
    assert unsafe(qos, eligible, 0.1).tolist() == [False, False, True, False, False]
    assert unsafe(qos, eligible, 0.0).tolist() == [False, True, True, False, False]
    assert not unsafe(qos, eligible, 1.0).any()


def test_the_best_eligible_candidate_is_never_masked() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        qos = -rng.random(n) * 2
        eligible = rng.random(n) < 0.7
        masked = unsafe(qos, eligible, float(rng.random() * 0.3))
        assert not (masked & ~eligible).any()
        if eligible.any():
            assert (eligible & ~masked).any()
            assert not masked[np.flatnonzero(eligible)[np.argmax(qos[eligible])]]
        else:
            assert not masked.any()


def test_plain_sequences_with_unknown_estimates() -> None:
    # A candidate without a hub estimate is neither masked nor the best.
    assert unsafe_of([-0.5, None, -0.05], [True, True, True], 0.2) == [True, False, False]
    assert unsafe_of([None, None], [True, True], 0.0) == [False, False]
    assert unsafe_of([-0.5, -0.05], [True, False], 0.2) == [False, False]  # the best declined


@pytest.mark.parametrize("margin", [-0.1, float("nan"), float("inf"), True, "0.1"])
def test_a_bad_margin_is_refused_at_profile_load(margin: object) -> None:
    from controlplane.scheduling.plugins.local_policy_bid import LocalPolicyBidArgs, _check

    with pytest.raises(ValueError, match="shield_margin"):
        _check(LocalPolicyBidArgs(shield_margin=margin))  # type: ignore[arg-type]


def test_the_command_line_margin_parses_off_and_numbers() -> None:
    from controlplane.commands.common import _shield_margin
    from controlplane.federation.config import single_cluster
    from controlplane.hub.settings import HubSettings
    from controlplane.scheduling.shield import DEFAULT_BID_SHIELD_MARGIN

    assert _shield_margin("off") is None and _shield_margin(" OFF ") is None
    assert _shield_margin("0") == 0.0 and _shield_margin("0.25") == 0.25
    settings = HubSettings(nats_url="nats://127.0.0.1:1", federation=single_cluster())
    assert settings.bid_shield_margin == DEFAULT_BID_SHIELD_MARGIN == 0.0
