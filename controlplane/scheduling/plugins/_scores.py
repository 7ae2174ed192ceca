"""Score helpers shared by plugins."""

from __future__ import annotations

import numpy as np

from controlplane.scheduling.framework import MAX_NODE_SCORE, FloatArray

__all__ = ["min_max_scores"]


def min_max_scores(raw: FloatArray) -> FloatArray:
    """``raw`` spread over 0..MAX_NODE_SCORE (floored, as kube's integer scores), the best raw
    value at the top; all candidates get the top score when they are equal."""
    if len(raw) == 0:
        return raw
    low, top = float(raw.min()), float(raw.max())
    if top - low <= 1e-12:
        return np.full_like(raw, MAX_NODE_SCORE)
    result: FloatArray = np.floor(MAX_NODE_SCORE * (raw - low) / (top - low))
    return result
