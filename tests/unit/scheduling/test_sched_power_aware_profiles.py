"""The power-aware kube default and Volcano as shipped: weights as upstream ships them."""

from __future__ import annotations

from controlplane.scheduling.profiles import load_profile


def weights(name):
    return {p.name: p.weight for p in load_profile(name).plugins}


def test_default_mostallocated_is_default_with_mostallocated_scoring():
    default, power_aware = weights("default"), weights("default-mostallocated")
    assert "NodeResourcesLeastAllocated" not in power_aware
    assert power_aware.pop("NodeResourcesMostAllocated") == default.pop("NodeResourcesLeastAllocated") == 1
    assert power_aware == default
    assert load_profile("default-mostallocated").percentage_of_nodes_to_score == 0


def test_volcano_is_nodeorder_plus_binpack_at_default_weights_without_preemption():
    w = weights("volcano")
    assert w["VolcanoBinpack"] == 1
    assert w["NodeResourcesLeastAllocated"] == 1
    assert w["NodeResourcesBalancedAllocation"] == 1
    assert w["NodeAffinity"] == 2
    assert w["PodTopologySpread"] == 2
    assert "DefaultPreemption" not in w
    assert load_profile("volcano").percentage_of_nodes_to_score == 100


def test_mostallocated_packs_where_default_spreads(mk):
    def second_node(profile):
        s = mk.scheduler(
            profile, nodes=[mk.cpu_node("a", cpu=8, mem_gib=8), mk.cpu_node("b", cpu=8, mem_gib=8)]
        )
        first = s.schedule(mk.request("w0", cpu=4, mem_gib=4)).placements[0].node
        second = s.schedule(mk.request("w1", cpu=1, mem_gib=1)).placements[0].node
        return first, second

    first, second = second_node("default-mostallocated")
    assert second == first
    first, second = second_node("default")
    assert second != first
