"""The edge agent's local quantized policy: per offered piece of work, a resource bin or decline.

``LocalPolicy.load()`` opens the shipped int8 ONNX model (``model/``); ``decide(node, offer,
weights)`` returns a :class:`Decision`. See ``docs/policy.md``.

Attributes are imported on first use so that ``edge-agent --help`` does not load numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edge_agent.policy.features import FEATURE_SCHEMA_VERSION, NodeView, Offer
    from edge_agent.policy.runtime import Decision, LocalPolicy
    from edge_agent.policy.weights import effective_weights

__all__ = ["FEATURE_SCHEMA_VERSION", "Decision", "LocalPolicy", "NodeView", "Offer", "effective_weights"]

_HOME = {
    "FEATURE_SCHEMA_VERSION": "edge_agent.policy.features",
    "NodeView": "edge_agent.policy.features",
    "Offer": "edge_agent.policy.features",
    "Decision": "edge_agent.policy.runtime",
    "LocalPolicy": "edge_agent.policy.runtime",
    "effective_weights": "edge_agent.policy.weights",
}


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
