"""The unschedulable summary reads as English for any count, and the extender words a resource
shortage as kube-scheduler does (issue 22, item 5)."""

from __future__ import annotations

import pytest

from controlplane.extender.decide import kube_reason
from controlplane.scheduling.cycle import counted


@pytest.mark.parametrize(
    ("count", "reason", "said"),
    [
        (1, "node has too little cpu", "1 node has too little cpu"),
        (3, "node has too little cpu", "3 nodes have too little cpu"),
        (2, "node has no MIG-enabled GPU", "2 nodes have no MIG-enabled GPU"),
        (2, "node is not ready", "2 nodes are not ready"),
        (4, "Insufficient cpu", "4 Insufficient cpu"),  # kube's own words, any count
        (2, "nodes have been tainted", "2 nodes have been tainted"),  # already plural
    ],
)
def test_a_reason_is_counted_in_the_right_number(count: int, reason: str, said: str) -> None:
    assert counted(count, reason) == said


@pytest.mark.parametrize(
    ("reason", "kube"),
    [
        ("node has too little cpu", "Insufficient cpu"),
        ("node has too little memory", "Insufficient memory"),
        ("node has too few GPUs", "Insufficient nvidia.com/gpu"),
        ("node has too little ephemeral storage", "Insufficient ephemeral-storage"),
        ("Insufficient cpu", "Insufficient cpu"),
        ("node has no MIG-enabled GPU", "node has no MIG-enabled GPU"),  # kube has no word for it
    ],
)
def test_the_extender_says_insufficient_as_kube_does(reason: str, kube: str) -> None:
    assert kube_reason(reason) == kube
