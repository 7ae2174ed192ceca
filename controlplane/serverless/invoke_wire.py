"""``InvokeV1`` on the wire, with each function version's code serialised once.

``encode(InvokeV1(...))`` deep-copies and serialises the function's code (its source included) on
every invocation; the code of a version never changes, so its JSON is kept per version and only
the invocation's own fields (id, event, keep-alive, timing) are serialised per call, and the event
only once per invocation (``event_json``: the size check and the send share it). The bytes decode
to the same ``InvokeV1`` as the codec's (``tests/unit/serverless/test_invoke_wire.py``).
"""

from __future__ import annotations

from typing import Any

import orjson

from edgeplane_contract.codec import SCHEMA_VERSION, encode

from controlplane.serverless.spec import FunctionSpec

__all__ = ["InvokeWire"]

# Bounded: functions come and go; a cleared cache only costs one serialisation per version.
_MAX_VERSIONS = 1024


class InvokeWire:
    """Encodes invocations of function versions, each version's code serialised once."""

    def __init__(self) -> None:
        # (name, version) -> (the spec serialised, its code's JSON)
        self._code: dict[tuple[str, int | None], tuple[FunctionSpec, bytes]] = {}

    def code_json(self, spec: FunctionSpec) -> bytes:
        """``spec``'s code as the codec serialises it inside an ``InvokeV1``."""
        key = (spec.name, spec.version)
        cached = self._code.get(key)
        if cached is not None and cached[0] is spec:
            return cached[1]
        text = encode(spec.code())
        if len(self._code) >= _MAX_VERSIONS:
            self._code.clear()
        self._code[key] = (spec, text)
        return text

    @staticmethod
    def event_json(event: Any) -> bytes:
        """``event`` as the codec serialises it (TypeError/ValueError: not JSON, as the codec raises)."""
        return encode(event)

    def encode(
        self,
        spec: FunctionSpec,
        *,
        invocation_id: str,
        event: Any = None,
        event_json: bytes | None = None,
        keep_alive_s: float = 600.0,
        allow_cold: bool = True,
        sent_at: float = 0.0,
    ) -> bytes:
        """The ``InvokeV1`` of ``spec`` with these fields, encoded; the event given as itself or
        already serialised (``event_json``, from :meth:`event_json`). TypeError/ValueError: an
        event that is not JSON, as the codec raises."""
        if event_json is None:
            event_json = self.event_json(event)
        head = orjson.dumps(
            {
                "invocation_id": invocation_id,
                "keep_alive_s": keep_alive_s,
                "allow_cold": allow_cold,
                "sent_at": sent_at,
                "v": SCHEMA_VERSION,
            }
        )
        return b"".join((head[:-1], b',"event":', event_json, b',"code":', self.code_json(spec), b"}"))
