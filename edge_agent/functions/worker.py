"""The function worker: one long-lived process per instance; imports the handler once.

Protocol (JSON lines): the worker writes ``{"ready": true, "init_ms": ...}`` (or
``{"ready": false, "error": {...}}``) once the handler is imported, then for every request line
``{"id": ..., "event": ..., "context": {...}}`` it writes ``{"id": ..., "ok": true, "result": ...,
"exec_ms": ...}`` or ``{"id": ..., "ok": false, "error": {"type", "message", "traceback"}}``; a
result that is not strict JSON (NaN, Infinity, a set, ...) is the error ``{"type": "ResultNotJSON",
"code": "bad_result"}``.
The protocol uses the process's original stdout; the handler's own prints go to stderr (the log).
A ``runtime: command`` function is any long-lived program that speaks this protocol.

Usage: ``python worker.py (--source FILE --handler NAME | --handler mod:fn [--path DIR]) [--concurrency N]``
(or ``python -m edge_agent.functions.worker``). Standard library only: the agent runs a copy of
this file (``Confinement.worker_script``) that the run user can read wherever edgeplane lives.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

__all__ = ["main"]


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


def load_handler(*, source: str | None, handler: str, path: str | None) -> Callable[..., Any]:
    if source:
        spec = importlib.util.spec_from_file_location("edgeplane_function", source)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {source}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["edgeplane_function"] = module
        spec.loader.exec_module(module)
        name = handler
    else:
        if path:
            sys.path.insert(0, path)
        module_name, _, name = handler.partition(":")
        if not name:
            raise ValueError(f"handler {handler!r} must be 'module:function'")
        module = importlib.import_module(module_name)
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"handler {name!r} not found or not callable")
    return function  # type: ignore[no-any-return]


class _Context:
    """What a handler gets as its second argument."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.invocation_id: str = data.get("invocation_id", "")
        self.function: str = data.get("function", "")
        self.version: int = data.get("version", 0)
        self.deadline: float = data.get("deadline", 0.0)

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.time()) if self.deadline else float("inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edgeplane-function-worker")
    parser.add_argument("--source")
    parser.add_argument("--handler", required=True)
    parser.add_argument("--path")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)

    # Keep the protocol on the real stdout; anything the handler prints goes to stderr.
    protocol: TextIO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        try:
            # Strict JSON: NaN and Infinity are a result error, never a line the hub could relay.
            line = json.dumps(message, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            error = _error(exc) | {"type": "ResultNotJSON", "code": "bad_result"}
            failed = {"id": message.get("id"), "ok": False, "error": error}
            if "exec_ms" in message:
                failed["exec_ms"] = message["exec_ms"]
            line = json.dumps(failed)
        with lock:
            protocol.write(line + "\n")
            protocol.flush()

    started = time.perf_counter()
    try:
        handler = load_handler(source=args.source, handler=args.handler, path=args.path)
    except BaseException as exc:  # user code may raise anything at import
        send({"ready": False, "error": _error(exc)})
        return 1
    send({"ready": True, "init_ms": (time.perf_counter() - started) * 1000})

    def run(request: dict[str, Any]) -> None:
        begin = time.perf_counter()
        try:
            result = handler(request.get("event"), _Context(request.get("context") or {}))
            send(
                {
                    "id": request["id"],
                    "ok": True,
                    "result": result,
                    "exec_ms": (time.perf_counter() - begin) * 1000,
                }
            )
        except BaseException as exc:
            send(
                {
                    "id": request["id"],
                    "ok": False,
                    "error": _error(exc),
                    "exec_ms": (time.perf_counter() - begin) * 1000,
                }
            )

    with ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except json.JSONDecodeError:
                continue
            pool.submit(run, request)
    return 0


if __name__ == "__main__":
    sys.exit(main())
