"""The hub's invocation encoder (code serialised once per version) sends what the codec would."""

from __future__ import annotations

import dataclasses

import pytest

from edgeplane_contract.messages import InvokeV1, decode, encode

from controlplane.serverless.invoke_wire import InvokeWire
from controlplane.serverless.spec import FunctionSpec

EVENTS = [
    None,
    0,
    {"i": 1, "s": 'é\n"x"', "nested": [1.5, True, None]},
    "x" * 1000,
    [],
    {},
    {"big": 2**70, "f": 1e16},
    "🛰",
]


def _spec(source: str = "def handle(e, c):\n    return e\n", version: int = 1) -> FunctionSpec:
    return FunctionSpec(name="echo", version=version, source=source, handler="handle", env={"A": "1"})


@pytest.mark.parametrize("event", EVENTS)
def test_bytes_decode_to_the_codecs_message_and_have_its_size(event: object) -> None:
    spec = _spec()
    fields = {
        "invocation_id": "a" * 32,
        "event": event,
        "keep_alive_s": 12.5,
        "allow_cold": False,
        "sent_at": 1.25,
    }
    wire = InvokeWire()
    sent = wire.encode(spec, **fields)
    expected = InvokeV1(code=spec.code(), **fields)  # type: ignore[arg-type]
    assert decode(sent, InvokeV1) == expected
    assert len(sent) == len(encode(expected))  # the size check (413) counts what is sent


def test_a_new_spec_object_under_the_same_name_and_version_is_serialised_again() -> None:
    wire = InvokeWire()
    first, second = _spec("def handle(e, c):\n    return 1\n"), _spec("def handle(e, c):\n    return 2\n")
    assert decode(wire.encode(first, invocation_id="1", event=None), InvokeV1).code.source == first.source
    assert decode(wire.encode(second, invocation_id="2", event=None), InvokeV1).code.source == second.source


def test_an_event_that_is_not_json_raises_like_the_codec() -> None:
    with pytest.raises(TypeError):
        InvokeWire().encode(_spec(), invocation_id="1", event={1, 2})
    with pytest.raises(TypeError):
        encode(dataclasses.replace(InvokeV1(invocation_id="1", code=_spec().code()), event={1, 2}))
