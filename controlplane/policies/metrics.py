"""Policy versions in ``/metrics``: the live canaries (state, share, both anomaly scores, samples)
and what the distributor's pushes came to."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from controlplane.policies.canary_live import CanaryRollouts
from controlplane.policies.distribution import PolicyDistributor

__all__ = ["PolicyCollector"]

_STATES = ("canary", "promoted", "rolled_back")


class PolicyCollector(Collector):
    def __init__(self, canaries: CanaryRollouts, distributor: PolicyDistributor) -> None:
        self.canaries = canaries
        self.distributor = distributor

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = GaugeMetricFamily(
            "edgeplane_policy_canary_state",
            "1 for the state a version's canary is in",
            labels=["version", "state"],
        )
        share = GaugeMetricFamily(
            "edgeplane_policy_canary_fraction", "The share of nodes a canary has", labels=["version"]
        )
        score = GaugeMetricFamily(
            "edgeplane_policy_canary_score",
            "The anomaly score of the canary's and the control group's decision regret",
            labels=["version", "group"],
        )
        samples = CounterMetricFamily(
            "edgeplane_policy_canary_samples", "Regret samples counted, by group", labels=["version", "group"]
        )
        for version, canary in sorted(self.canaries.canaries.items()):
            v = str(version)
            described = canary.describe()
            for name in _STATES:
                state.add_metric([v, name], 1.0 if described["state"] == name else 0.0)
            share.add_metric([v], float(described["fraction"]))
            for group in ("canary", "control"):
                score.add_metric([v, group], float(described["scores"][group]))
                samples.add_metric([v, group], float(described["samples"][group]))
        pushes = CounterMetricFamily(
            "edgeplane_policy_pushes", "Policy versions sent to nodes, by outcome", labels=["outcome"]
        )
        for outcome, count in sorted(self.distributor.outcomes.items()):
            pushes.add_metric([outcome], float(count))
        yield from (state, share, score, samples, pushes)
