"""What one invocation came to (:class:`InvocationOutcome`), and taking an agent's result into it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from edgeplane_contract.messages import InvokeResultV1

__all__ = ["InvocationOutcome", "accept_result"]

_NOT_STRICT_JSON = {
    "code": "bad_result",
    "type": "ResultNotJSON",
    "message": "the handler's result is not strict JSON (NaN or Infinity)",
}


@dataclass(slots=True)
class InvocationOutcome:
    """The result or error of one invocation, where it ran and how long each part took."""

    invocation_id: str
    function: str
    version: int
    node: str | None
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    cold_start: bool = False
    cold_start_ms: float = 0.0
    queue_ms: float = 0.0
    exec_ms: float = 0.0
    total_ms: float = 0.0
    mode: str = ""
    # ``result`` as strict JSON, when an agent's result was taken in (checked by serialising it
    # once: the API answers these bytes instead of serialising it again).
    result_json: str | None = None

    def timings(self) -> dict[str, float]:
        return {
            "queue_ms": round(self.queue_ms, 3),
            "cold_start_ms": round(self.cold_start_ms, 3),
            "exec_ms": round(self.exec_ms, 3),
            "total_ms": round(self.total_ms, 3),
        }


def accept_result(outcome: InvocationOutcome, result: InvokeResultV1) -> None:
    """Take an agent's result into ``outcome``: a result that is not strict JSON (NaN or Infinity
    from a worker or command runtime that allows them) becomes an error, never a relayed result:
    the API's answer would not be JSON."""
    text = _strict_json(result.result) if result.ok else None
    ok = text is not None
    outcome.ok = ok
    outcome.result = result.result if ok else None
    outcome.result_json = text
    outcome.error = dict(_NOT_STRICT_JSON) if result.ok and not ok else result.error
    outcome.cold_start = result.cold_start
    outcome.cold_start_ms = result.cold_start_ms
    outcome.queue_ms = result.queue_ms
    outcome.exec_ms = result.exec_ms


def _strict_json(value: Any) -> str | None:
    """``value`` as strict JSON, or None when it is not (NaN, Infinity, not serialisable)."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
