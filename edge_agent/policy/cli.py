"""``edge-agent policy info``: what model the agent would load.

How fast it decides is measured by ``controlplane policy bench``: its cases come from the
trainer's environment, which is the hub's.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

__all__ = ["configure", "info", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``info`` to a ``policy`` subparser."""
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION")
    sub.required = True
    p_info = sub.add_parser("info", help="print the local policy model's metadata, size, opset, quantization")
    p_info.add_argument("--model", help="ONNX model path (default: the shipped int8 model)")
    p_info.add_argument("--json", action="store_true", help="print JSON")


def info(model: str | None = None) -> dict[str, Any]:
    """The facts ``edge-agent policy info`` prints."""
    from edgeplane_contract.policy.runtime import LocalPolicy

    return LocalPolicy.load(model).info()


def _print_info(facts: dict[str, Any]) -> None:
    meta = facts.get("metadata") or {}
    model = meta.get("model", {})
    quant = model.get("quantization", {})
    print(f"path:            {facts['path']}")
    print(f"source:          {facts['source']}")
    if facts.get("fallback_reason"):
        print(f"fallback reason: {facts['fallback_reason']}")
    size = facts.get("file_bytes")
    print(f"size:            {size if size is not None else '-'} bytes")
    print(f"opset:           {facts.get('opset') or '-'}")
    quantized = facts.get("quantized")
    print(
        f"quantized:       {'yes' if quantized else 'no' if quantized is not None else '-'}"
        + (f" ({quant.get('chosen')})" if quant.get("chosen") else "")
    )
    print(
        f"feature schema:  v{facts['feature_schema_version']} "
        f"(model: v{meta.get('feature_schema_version', '-')})"
    )
    actions = meta.get("actions", {})
    if actions:
        print(f"actions:         {actions.get('n_bins')} bins + decline ({actions.get('order')})")
    if model:
        print(
            f"layers:          {' -> '.join(str(n) for n in model.get('layers', []))} "
            f"({model.get('n_params')} params)"
        )
    training = meta.get("training", {})
    if training:
        cfg = training.get("config", {})
        print(
            f"training:        {training.get('method')}; "
            f"seed {cfg.get('seed')}, {training.get('train_rows')} rows"
        )
    overall = meta.get("evaluation", {}).get("slices", {}).get("all", {}).get("policies", {})
    for name in ("learned-int8", "heuristic", "as-requested", "decline"):
        if name in overall:
            print(f"held-out R:      {name:<14} {overall[name]['mean_reward']:.4f}")


def run(args: argparse.Namespace) -> int:
    """Entry point for ``edge-agent policy info``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    facts = info(args.model)
    if args.json:
        print(json.dumps(facts, indent=2, default=str))
    else:
        _print_info(facts)
    return 0
