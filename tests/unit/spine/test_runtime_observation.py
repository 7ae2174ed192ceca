"""The runtime observation a Succeeded report carries: its wire form, and what makes one unusable."""

from __future__ import annotations

import json

import pytest

from edgeplane_contract.messages import (
    MessageError,
    PlacementState,
    RuntimeObservation,
    StatusReportV1,
    decode,
    encode,
)

BINS = RuntimeObservation.BINS


def _report(observation: object) -> bytes:
    placement = {"placement_id": "p1", "workload_id": "w1", "state": "Succeeded", "exit_code": 0}
    if observation is not None:
        placement["observation"] = observation
    return json.dumps({"v": 1, "report_id": "r1", "node": "n1", "placement": placement}).encode()


def test_a_succeeded_report_with_an_observation_round_trips():
    observation = RuntimeObservation(runtime_s=2.5, load_seconds=[0.0] * 8 + [1.0, 1.5], cpu_pressure=0.25)
    report = StatusReportV1(
        report_id="r1",
        node="n1",
        placement=PlacementState("p1", "w1", "Succeeded", exit_code=0, observation=observation),
    )
    back = decode(encode(report), StatusReportV1)
    assert back == report
    assert back.placement.observation is not None and back.placement.observation.invalid() is None


def test_a_report_of_an_older_agent_without_observation_still_parses():
    assert decode(_report(None), StatusReportV1).placement.observation is None


def test_an_observation_with_a_non_number_or_non_finite_value_is_rejected_at_decode():
    with pytest.raises(MessageError, match=r"placement\.observation\.load_seconds"):
        decode(_report({"runtime_s": 1.0, "load_seconds": ["x"] * BINS}), StatusReportV1)
    nan = _report({"runtime_s": 1.0, "load_seconds": [1.0] * BINS}).replace(
        b'"runtime_s": 1.0', b'"runtime_s": NaN'
    )
    with pytest.raises(MessageError, match="finite"):
        decode(nan, StatusReportV1)
    with pytest.raises(MessageError, match="missing"):
        decode(_report({"load_seconds": [1.0] * BINS}), StatusReportV1)


@pytest.mark.parametrize(
    ("observation", "why"),
    [
        ({"runtime_s": 0.0, "load_seconds": [1.0] * BINS}, "runtime_s"),
        ({"runtime_s": -3.0, "load_seconds": [1.0] * BINS}, "runtime_s"),
        ({"runtime_s": 1.0, "load_seconds": [1.0] * (BINS - 1)}, "bins"),
        ({"runtime_s": 1.0, "load_seconds": []}, "bins"),
        ({"runtime_s": 1.0, "load_seconds": [-1.0] + [1.0] * (BINS - 1)}, "non-negative"),
        ({"runtime_s": 1.0, "load_seconds": [0.0] * BINS}, "cover some time"),
        ({"runtime_s": 1.0, "load_seconds": [1.0] * BINS, "cpu_pressure": 1.5}, "cpu_pressure"),
    ],
)
def test_a_well_typed_but_unusable_observation_decodes_and_says_why(observation, why):
    """The report still decodes (its state must be applied); the receiver ignores the observation."""
    placement = decode(_report(observation), StatusReportV1).placement
    assert placement.state == "Succeeded"
    assert placement.observation is not None
    assert why in (placement.observation.invalid() or "")
