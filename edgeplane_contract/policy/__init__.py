"""The edge agent's local quantized policy: per offered piece of work, a resource bin or decline.

``LocalPolicy.load()`` opens the shipped int8 ONNX model (``model/``); ``decide(node, offer,
weights)`` returns a :class:`Decision`. See ``docs/policy.md``. Part of the contract: the agent
decides with it, the hub's trainer and its bid plugin build the same features and actions.

Attributes are imported on first use so that ``edge-agent --help`` does not load numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeplane_contract.policy.features import FEATURE_SCHEMA_VERSION, NodeView, Offer
    from edgeplane_contract.policy.runtime import Decision, LocalPolicy
    from edgeplane_contract.policy.weights import effective_weights

__all__ = ["FEATURE_SCHEMA_VERSION", "Decision", "LocalPolicy", "NodeView", "Offer", "effective_weights"]

_HOME = {
    "FEATURE_SCHEMA_VERSION": "edgeplane_contract.policy.features",
    "NodeView": "edgeplane_contract.policy.features",
    "Offer": "edgeplane_contract.policy.features",
    "Decision": "edgeplane_contract.policy.runtime",
    "LocalPolicy": "edgeplane_contract.policy.runtime",
    "effective_weights": "edgeplane_contract.policy.weights",
}


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
