"""The NATS message codec: round trips, and clear errors for anything malformed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeplane_contract.messages import (
    CommandV1,
    GpuTelemetry,
    HeartbeatV1,
    MessageError,
    NodeResources,
    RegisterV1,
    RunSpec,
    Subjects,
    Telemetry,
    decode,
    encode,
    valid_token,
)


def test_a_register_message_survives_a_round_trip():
    message = RegisterV1(
        node="n1",
        cluster="c1",
        boot_id="b",
        agent_version="0.1.0",
        resources=NodeResources(
            cpu=4, memory=2**30, gpus=[GpuTelemetry(index=0, name="A100", mig_enabled=True)]
        ),
        heartbeat_interval_s=1.0,
        telemetry=Telemetry(cpu_percent=1.0, memory_used_bytes=1, memory_total_bytes=2, battery_percent=None),
    )
    assert decode(encode(message), RegisterV1) == message


@given(
    command=st.lists(st.text(min_size=1), min_size=1, max_size=4),
    env=st.dictionaries(st.text(min_size=1), st.text(), max_size=3),
    cpu=st.floats(min_value=0.001, max_value=512, allow_nan=False),
)
def test_run_commands_round_trip_for_any_argv_and_env(command, env, cpu):
    message = CommandV1(
        command_id="c",
        kind="run",
        placement_id="p",
        workload_id="w",
        spec=RunSpec(command=command, env=env, cpu=cpu),
    )
    assert decode(encode(message), CommandV1) == message


@pytest.mark.parametrize(
    ("payload", "field", "reason"),
    [
        (b"{nope", None, "not JSON"),
        (b"[1]", None, "not a JSON object"),
        (b'{"v": 2, "node": "n"}', "v", "unsupported schema version"),
        (b'{"node": "n"}', "v", "unsupported schema version"),
        (
            b'{"v": 1, "node": "n", "boot_id": "b", "seq": "1", "sent_at": 0, "telemetry": {}}',
            "seq",
            "integer",
        ),
        (b'{"v": 1, "node": "n", "boot_id": "b", "seq": 1, "sent_at": 0}', "telemetry", "missing"),
        (
            b'{"v": 1, "node": "n", "boot_id": "b", "seq": 1, "sent_at": 0, '
            b'"telemetry": {"cpu_percent": true, "memory_used_bytes": 1, "memory_total_bytes": 1}}',
            "telemetry.cpu_percent",
            "number",
        ),
    ],
)
def test_malformed_heartbeats_are_rejected_with_the_field_named(payload, field, reason):
    with pytest.raises(MessageError) as info:
        decode(payload, HeartbeatV1)
    assert info.value.field == field
    assert reason in str(info.value)


def test_subjects_are_versioned_and_scoped_by_cluster_and_node():
    subjects = Subjects("edge-eu")
    assert subjects.heartbeat("n1") == "edgeplane.v1.edge-eu.node.n1.heartbeat"
    assert subjects.command("n1") == "edgeplane.v1.edge-eu.node.n1.cmd"
    assert subjects.agent_wildcard("report") == "edgeplane.v1.edge-eu.node.*.report"
    assert Subjects.node_from_subject(subjects.register("n-7")) == "n-7"
    assert Subjects("c", prefix="acme.ep.v1").hub_hello() == "acme.ep.v1.hub.hello"
    assert valid_token("edge_1-a") and not valid_token("a.b") and not valid_token("*") and not valid_token("")
