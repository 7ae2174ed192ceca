"""Load prediction: arrivals per key (function, cluster) per time bin, a few bins ahead.

Pure functions of history (arrays in, arrays out): baselines (naive, seasonal-naive, EWMA), a
seasonal baseline (profile blended with a smoothed level) that needs only numpy, and a learned
model on lag features (:class:`LoadPredictor`, scikit-learn, the ``[predict]`` extra).
See docs/prediction.md.
"""

from controlplane.predict.baselines import (
    ewma,
    naive,
    seasonal_baseline,
    seasonal_lag,
    seasonal_naive,
    seasonal_profile,
)
from controlplane.predict.metrics import mae, mape, wape
from controlplane.predict.model import LoadPredictor, PredictDependencyError
from controlplane.predict.series import as_history

__all__ = [
    "LoadPredictor",
    "PredictDependencyError",
    "as_history",
    "ewma",
    "mae",
    "mape",
    "naive",
    "seasonal_baseline",
    "seasonal_lag",
    "seasonal_naive",
    "seasonal_profile",
    "wape",
]
