"""What a caller may see of secrets in a response body.

Environment values (``env`` objects in workload and function specs) are shown as ``***`` unless
the caller has the ``admin`` scope: they are where passwords and API keys go. Function
tracebacks (``traceback`` fields of invocation errors) reach only callers with the ``functions``
scope, since they can quote source and data.
"""

from __future__ import annotations

from typing import Any

from controlplane.auth.tokens import Principal

__all__ = ["MASK", "redact"]

MASK = "***"


def redact(body: Any, principal: Principal | None) -> Any:
    """A copy of a JSON body with what ``principal`` may not see masked or removed."""
    show_env = principal is not None and principal.allows("admin")
    show_traceback = principal is not None and principal.allows("functions")
    if show_env and show_traceback:
        return body
    return _walk(body, show_env=show_env, show_traceback=show_traceback)


def _walk(value: Any, *, show_env: bool, show_traceback: bool) -> Any:
    if isinstance(value, list):
        return [_walk(v, show_env=show_env, show_traceback=show_traceback) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key == "env" and isinstance(item, dict) and not show_env:
            out[key] = {name: MASK for name in item}
        elif key == "traceback" and not show_traceback:
            continue
        else:
            out[key] = _walk(item, show_env=show_env, show_traceback=show_traceback)
    return out
