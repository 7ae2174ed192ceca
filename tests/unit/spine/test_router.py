"""The cold-start-aware router: a pure function of the hub's view."""

from __future__ import annotations

from controlplane.serverless.router import EnergyWeights, NodeOption, route


def test_a_warm_instance_beats_a_cold_start_anywhere():
    decision = route(
        [NodeOption("cold-node", cold_ms=300), NodeOption("warm-node", warm_free=1, net_ms=5)], exec_ms=20
    )
    assert decision is not None and (decision.node, decision.mode) == ("warm-node", "warm")
    assert decision.expected_ms == 25


def test_waiting_for_a_busy_instance_wins_when_execution_is_shorter_than_a_cold_start():
    short = route([NodeOption("n", busy_instances=1, cold_ms=500)], exec_ms=10)
    long = route([NodeOption("n", busy_instances=1, cold_ms=50)], exec_ms=400)
    assert short is not None and short.mode == "queue" and not short.allow_cold
    assert long is not None and long.mode == "cold" and long.allow_cold


def test_cold_starts_go_to_mains_before_battery_and_drained_batteries_last():
    options = [
        NodeOption("battery-low", power_source="battery", battery_percent=10),
        NodeOption("battery-full", power_source="battery", battery_percent=100),
        NodeOption("mains", power_source="mains"),
    ]
    decision = route(options, exec_ms=50)
    assert decision is not None and decision.node == "mains"
    ranked = [decision.node] + [a.node for a in decision.alternatives]
    assert ranked == ["mains", "battery-full", "battery-low"]


def test_w3_follows_the_reward_modules_adaptive_rule():
    weights = EnergyWeights()
    assert weights.w3("mains", None) < weights.w3("battery", 100) < weights.w3("battery", 20)


def test_no_node_means_no_route():
    assert route([NodeOption("n", can_start=False)], exec_ms=1) is None
