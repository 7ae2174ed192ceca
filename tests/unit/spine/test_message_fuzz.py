"""Every NATS message decoder, fuzzed: any frame either decodes or raises MessageError, nothing else.

A peer on the bus may be old, buggy or hostile; the hub and the agents count and drop what they
cannot decode, so a decoder that raised anything but MessageError (RecursionError, OverflowError,
a ValueError from int parsing, ...) would take down the subscription that called it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeplane_contract import messages
from edgeplane_contract.messages import MessageError, decode

# Every message type on the bus (the payload pieces are fuzzed inside them).
TYPES: list[type] = sorted(
    (
        obj
        for name in messages.__all__
        if dataclasses.is_dataclass(obj := getattr(messages, name)) and hasattr(obj, "TYPE")
    ),
    key=lambda cls: cls.__name__,
)
FUZZ = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
# Values that have broken JSON decoders: numbers beyond float and int limits, non-finite floats.
NASTY_LITERALS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1" * 5000,
    "-" + "9" * 5000,
    "0." + "0" * 5000 + "1",
    "1e-999",
    str(2**64),
    str(-(2**63) - 1),
    '"' + "\\ud800" + '"',
    "[" * 5000 + "]" * 5000,
    '{"a":' * 5000 + "1" + "}" * 5000,
    '""',
    "true",
    "null",
    "{}",
    "[]",
]


def _valid(tp: Any) -> st.SearchStrategy[Any]:
    """JSON values that the codec must accept for type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return st.one_of([_valid(arg) for arg in typing.get_args(tp)])
    if tp is type(None):
        return st.none()
    if origin is list:
        return st.lists(_valid(typing.get_args(tp)[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), _valid(typing.get_args(tp)[1]), max_size=3)
    if dataclasses.is_dataclass(tp):
        return _valid_object(tp)  # type: ignore[arg-type]
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(min_value=-(2**63), max_value=2**63 - 1)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**53), 2**53)
    if tp is str:
        return st.text(max_size=20)
    if tp is Any:
        return st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
            max_leaves=8,
        )
    raise AssertionError(f"no strategy for {tp!r}")


def _valid_object(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    required, optional = {}, {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "v":  # a frame must say its schema version
            required["v"] = st.just(1)
            continue
        missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        (required if missing else optional)[f.name] = _valid(hints[f.name])
    return st.fixed_dictionaries(required, optional=optional)


def _frame(value: Any) -> bytes:
    # allow_nan: a peer may well send the NaN and Infinity Python's json writes by default.
    return json.dumps(value).encode()


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*path, index))
    return found


@st.composite
def _mutated(draw: st.DrawFn, cls: type) -> bytes:
    """A valid message of ``cls`` with one field removed, retyped or made nasty."""
    body = draw(_valid_object(cls))
    path = draw(st.sampled_from(_paths(body)))
    if not path:
        return _frame(draw(json_values))
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    action = draw(st.sampled_from(["remove", "retype", "nasty", "deep"]))
    if action == "remove" and isinstance(parent, dict):
        del parent[path[-1]]
        return _frame(body)
    if action == "nasty":
        parent[path[-1]] = "\x00MARK\x00"
        literal = draw(st.sampled_from(NASTY_LITERALS))
        return _frame(body).replace(b'"\\u0000MARK\\u0000"', literal.encode())
    if action == "deep":
        depth = draw(st.integers(min_value=1, max_value=3000))
        parent[path[-1]] = "\x00MARK\x00"
        return _frame(body).replace(b'"\\u0000MARK\\u0000"', b"[" * depth + b"]" * depth)
    parent[path[-1]] = draw(json_values)
    return _frame(body)


def _decodes_or_message_error(data: bytes, cls: type) -> bool:
    """True when it decoded; False on MessageError; anything else escapes and fails the test."""
    try:
        decode(data, cls)
    except MessageError:
        return False
    return True


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.__name__)
@FUZZ
@given(data=st.data())
def test_every_valid_frame_decodes(cls, data):
    body = data.draw(_valid_object(cls))
    decoded = decode(_frame(body), cls)
    assert isinstance(decoded, cls)


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.__name__)
@FUZZ
@given(data=st.data())
def test_a_mutated_frame_decodes_or_raises_message_error(cls, data):
    _decodes_or_message_error(data.draw(_mutated(cls)), cls)


@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.__name__)
@FUZZ
@given(raw=st.binary(max_size=200) | json_values.map(_frame))
def test_random_bytes_and_random_json_decode_or_raise_message_error(cls, raw):
    _decodes_or_message_error(raw, cls)


@pytest.mark.parametrize("literal", NASTY_LITERALS, ids=lambda s: s[:12])
@pytest.mark.parametrize("cls", TYPES, ids=lambda cls: cls.__name__)
def test_nasty_literals_anywhere_are_a_message_error(cls, literal):
    assert not _decodes_or_message_error(literal.encode(), cls)
    assert not _decodes_or_message_error(b'{"v":' + literal.encode() + b"}", cls)


def test_non_finite_and_oversized_numbers_in_float_fields_are_refused_with_the_field_named():
    base = {"v": 1, "hub_id": "h", "started_at": 1.0}
    for literal in ("NaN", "Infinity", "-Infinity", "1e999", "9" * 400):
        frame = _frame(base).replace(b"1.0", literal.encode())
        with pytest.raises(MessageError) as caught:
            decode(frame, messages.HubHelloV1)
        assert caught.value.field == "started_at", literal


def test_integers_beyond_64_bits_are_refused_with_the_field_named():
    frame = b'{"v":1,"report_id":"r","node":"n","placement":{"placement_id":"p","workload_id":"w",'
    for literal in (str(2**63), str(-(2**63) - 1), "9" * 400):
        with pytest.raises(MessageError) as caught:
            decode(
                frame + b'"state":"Failed","exit_code":' + literal.encode() + b"}}", messages.StatusReportV1
            )
        assert caught.value.field == "placement.exit_code", literal


def test_deep_nesting_in_a_free_form_field_is_refused_not_a_recursion_error():
    deep = b"[" * 100_000 + b"]" * 100_000
    frame = b'{"v":1,"invocation_id":"i","ok":true,"result":' + deep + b"}"
    with pytest.raises(MessageError):
        decode(frame, messages.InvokeResultV1)
