"""Routing first as if every Ready node could start an instance (skipping the placement filters)
decides as the exact options do whenever it picks a warm instance or a queue
(``Invoker._route``): the filters only take cold-start options away."""

from __future__ import annotations

import dataclasses
import random

from controlplane.serverless.router import EnergyWeights, NodeOption, route


def _random_options(rng: random.Random) -> list[NodeOption]:
    options = []
    for i in range(rng.randint(1, 5)):
        warm_free = rng.choice([0, 0, 1, 3])
        options.append(
            NodeOption(
                node=f"n{i}",
                warm_free=warm_free,
                busy_instances=rng.choice([0, 1]) if warm_free == 0 else 0,
                can_start=rng.random() < 0.5,
                net_ms=rng.choice([0.5, 2.0, 40.0]),
                cold_ms=rng.choice([0.0, 5.0, 300.0]),
                in_flight=rng.randint(0, 3),
                power_source=rng.choice(["mains", "battery"]),
                battery_percent=rng.choice([None, 15.0, 90.0]),
            )
        )
    return options


def test_a_warm_or_queued_pick_on_assumed_fits_is_the_exact_pick() -> None:
    rng = random.Random(7)
    weights = EnergyWeights()
    checked = 0
    for _ in range(3000):
        exact = _random_options(rng)
        # What the unfiltered options look like: every node may start one, and nodes that only
        # the filters had removed (no instance there) appear as cold-start options.
        assumed = [dataclasses.replace(o, can_start=True) for o in exact]
        assumed += [
            NodeOption(node=f"x{i}", cold_ms=rng.choice([0.0, 300.0])) for i in range(rng.randint(0, 2))
        ]
        exec_ms = rng.choice([0.1, 5.0, 100.0])
        optimistic = route(assumed, exec_ms=exec_ms, weights=weights)
        truth = route(exact, exec_ms=exec_ms, weights=weights)
        if optimistic is None or optimistic.mode == "cold":
            continue
        checked += 1
        assert truth is not None
        assert (optimistic.node, optimistic.mode, optimistic.expected_ms) == (
            truth.node,
            truth.mode,
            truth.expected_ms,
        )
    assert checked > 500
