"""The policy client's ``rollout --labels K=V,..``: pairs as a mapping, a malformed one refused
naming the flag."""

from __future__ import annotations

import pytest

from controlplane.policies.client import _labels


def test_labels_are_name_value_pairs() -> None:
    assert _labels("tier=canary, site = x") == {"tier": "canary", "site": "x"}
    assert _labels("empty=") == {"empty": ""}


@pytest.mark.parametrize("text", ["tier", "=canary", "tier=canary,site"])
def test_a_pair_without_a_name_and_a_value_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(SystemExit, match=r"--labels: .* is not NAME=VALUE"):
        _labels(text)
