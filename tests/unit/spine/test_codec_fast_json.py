"""The codec's JSON goes through orjson on the hot path: it must read and write what the standard
library did, value for value and type for type, and fail where it failed.

``codec._loads`` takes orjson's parse only where the two parsers agree (it falls back to
``json.loads`` for long digit runs and whatever orjson refuses); ``codec.encode`` writes the
dataclass with orjson and falls back to the walk to plain values for types orjson does not know.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeplane_contract import codec, messages
from edgeplane_contract.messages import HeartbeatV1, MessageError, Telemetry, decode, encode

from .test_message_fuzz import NASTY_LITERALS, TYPES, _valid_object, json_values

QUICK = settings(max_examples=300, deadline=None, database=None)


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (1 and 1.0 differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _outcome(parse: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse(data)
    except (ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


# Numbers as peers write them: Python's json (repr of floats, big integers), other encoders'
# exponents and trailing zeros, and digit runs around the 64-bit and 19-digit limits.
number_literals = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.17e}"),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.integers(min_value=1, max_value=25).map(lambda n: "9" * n),
    st.integers(min_value=1, max_value=25).map(lambda n: "-1" + "0" * n),
    st.integers(min_value=1, max_value=25).map(lambda n: "0." + "1" * n),
    st.sampled_from(
        ["0", "-0", "-0.0", "1E5", "1e-5", "2.5e+3", "1.0e-400", "1e308", "1.7976931348623157e308"]
    ),
)


@QUICK
@given(json_values)
def test_any_json_value_reads_the_same_as_the_standard_parser(value):
    data = json.dumps(value).encode()  # NaN, Infinity and big integers as Python writes them
    assert _same(codec._loads(data), json.loads(data))


@QUICK
@given(st.lists(number_literals, min_size=1, max_size=6))
def test_numbers_read_as_the_same_type_and_value(literals):
    data = ("[" + ",".join(literals) + "]").encode()
    fast, slow = _outcome(codec._loads, data), _outcome(json.loads, data)
    assert fast[0] == slow[0] and (fast[0] == "error" or _same(fast[1], slow[1])), literals


@pytest.mark.parametrize("literal", NASTY_LITERALS, ids=lambda s: s[:12])
def test_frames_orjson_refuses_or_reads_otherwise_get_the_standard_verdict(literal):
    for data in (literal.encode(), b'{"v":' + literal.encode() + b"}"):
        fast, slow = _outcome(codec._loads, data), _outcome(json.loads, data)
        assert fast[0] == slow[0]
        if fast[0] == "ok":
            assert _same(fast[1], slow[1])


@pytest.mark.parametrize(
    "data",
    [
        '{"a":1}'.encode("utf-16"),  # Python's parser detects UTF-16 and UTF-32
        b'\xef\xbb\xbf{"a":1}',  # a UTF-8 byte-order mark
        b'{"a":"\\ud800"}',  # a lone surrogate
        b'{"a":18446744073709551616}',  # past 64 bits: orjson would make it a float
        b'{"a":-9223372036854775809}',
        b'{"a":1,"a":2}',  # the last of duplicate keys
    ],
)
def test_frames_where_the_two_parsers_differ_read_as_the_standard_library_reads_them(data):
    assert _same(codec._loads(data), json.loads(data))


def test_an_integer_past_64_bits_in_an_integer_field_is_still_refused_with_the_field_named():
    frame = b'{"v":1,"report_id":"r","node":"n","placement":{"placement_id":"p","workload_id":"w",'
    for literal in (str(2**64), str(2**63), str(-(2**63) - 1), str(-(2**64))):
        with pytest.raises(MessageError) as caught:
            decode(
                frame + b'"state":"Failed","exit_code":' + literal.encode() + b"}}", messages.StatusReportV1
            )
        assert caught.value.field == "placement.exit_code", literal


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=15, deadline=None, database=None)
@given(data=st.data())
def test_every_message_encodes_to_what_the_plain_walk_wrote(cls, data):
    """The bytes differ (orjson writes UTF-8 and its own float digits); the JSON they carry does
    not, but for a non-finite float in a free-form field (an event, a result), which is now null
    (as JavaScript's JSON.stringify writes it) where it was a ``NaN`` or ``Infinity`` only Python
    reads. Typed fields never hold one (the decoder refuses it). Each message decodes back to
    itself where it has no such float."""
    raw = data.draw(_valid_object(cls))
    try:
        message = decode(json.dumps(raw).encode(), cls)
    except MessageError:
        return  # the strategy's value broke a field's own rule: not this test's concern
    written = encode(message)
    old = json.loads(json.dumps(codec._plain(message), separators=(",", ":")).encode())
    assert _same(json.loads(written), _non_finite_as_null(old))
    if _same(old, _non_finite_as_null(old)):
        assert decode(written, cls) == message


def _non_finite_as_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_non_finite_as_null(v) for v in value]
    if isinstance(value, dict):
        return {k: _non_finite_as_null(v) for k, v in value.items()}
    return value


def _heartbeat(**telemetry: Any) -> HeartbeatV1:
    fields = {"cpu_percent": 5.0, "memory_used_bytes": 2**30, "memory_total_bytes": 8 * 2**30}
    fields.update(telemetry)
    return HeartbeatV1(node="n1", boot_id="b" * 32, seq=1, sent_at=1.7e9, telemetry=Telemetry(**fields))


def test_a_value_orjson_does_not_know_goes_the_standard_way():
    """A NumPy float (the power models compute with NumPy) is written as a number, as before."""
    heartbeat = _heartbeat(cpu_percent=np.float64(12.5), power_w=np.float64(7.25))
    with pytest.raises(TypeError):
        import orjson

        orjson.dumps(heartbeat)  # what sends it the standard way
    back = decode(encode(heartbeat), HeartbeatV1)
    assert back.telemetry.cpu_percent == 12.5 and back.telemetry.power_w == 7.25


def test_a_non_finite_number_is_refused_when_required_and_absent_when_optional():
    with pytest.raises(MessageError) as caught:
        decode(encode(_heartbeat(cpu_percent=float("nan"))), HeartbeatV1)
    assert caught.value.field == "telemetry.cpu_percent"
    back = decode(encode(_heartbeat(power_w=float("inf"))), HeartbeatV1)
    assert back.telemetry.power_w is None


def test_non_ascii_text_round_trips_and_is_written_as_utf8():
    heartbeat = dataclasses.replace(_heartbeat(), node="nœud-🛰")
    written = encode(heartbeat)
    assert "nœud-🛰".encode() in written
    assert decode(written, HeartbeatV1).node == "nœud-🛰"
