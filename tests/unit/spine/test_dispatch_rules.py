"""What an agent's answer to a command means for its placement, as a table."""

from __future__ import annotations

import pytest

from edgeplane_contract.messages import CommandAckV1, CommandV1

from controlplane.bus.hub_bus import MessageTooLargeError
from controlplane.hub.dispatch import AckEffect, ack_effect

RUN = CommandV1(command_id="c1", kind="run", placement_id="p", workload_id="w")
STOP = CommandV1(command_id="c1", kind="stop", placement_id="p", workload_id="w")
TOO_LARGE = MessageTooLargeError("subject", 2_000_000, 1_048_576)


def ack(accepted: bool, reason: str = "", command_id: str = "c1") -> CommandAckV1:
    return CommandAckV1(command_id=command_id, accepted=accepted, reason=reason)


@pytest.mark.parametrize(
    ("command", "answer", "effect"),
    [
        (RUN, ack(True), AckEffect.RUN_ACKED),
        (RUN, ack(False, "stopped before it ran"), AckEffect.RUN_REFUSED),
        (RUN, None, AckEffect.NONE),  # nobody answered in time: sent again
        (RUN, TimeoutError(), AckEffect.NONE),
        (RUN, ack(True, command_id="other"), AckEffect.NONE),  # an answer to another command
        (RUN, TOO_LARGE, AckEffect.TOO_LARGE),
        (STOP, TOO_LARGE, AckEffect.NONE),
        (STOP, ack(True), AckEffect.STOP_ACKED),
        (STOP, ack(True, "unknown placement"), AckEffect.NEVER_RAN),
        (STOP, ack(False, "busy"), AckEffect.NONE),
    ],
)
def test_an_answer_to_a_command_settles_its_placement_or_leaves_it_to_be_sent_again(command, answer, effect):
    assert ack_effect(command, answer) is effect
