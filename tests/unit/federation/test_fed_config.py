"""Federation config: the placement-ranking keys this issue adds, and error reporting."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from controlplane.errors import ConfigError
from controlplane.federation.config import load_federation, parse_federation

REPO = Path(__file__).resolve().parents[3]
BASE = {
    "version": 1,
    "clusters": [{"name": "a", "region": "r1"}, {"name": "b", "region": "r2"}],
    "latency_ms": {"r1": {"r2": 50}},
    "placement": {"divide": "capacity"},
}


def doc(**placement):
    d = copy.deepcopy(BASE)
    d["placement"].update(placement)
    return d


def test_the_shipped_file_still_parses():
    fed = load_federation(REPO / "deploy" / "federation.yaml")
    assert len(fed.clusters) == 3
    assert fed.placement.latency_weight == 1.0  # default of the new key


def test_ranking_weights_are_read():
    fed = parse_federation(doc(latency_weight=2, cost_weight=0, carbon_weight=1.5))
    assert (fed.placement.latency_weight, fed.placement.cost_weight, fed.placement.carbon_weight) == (
        2,
        0,
        1.5,
    )


@pytest.mark.parametrize(
    ("override", "key", "reason"),
    [
        ({"latency_weight": -1}, "placement.latency_weight", ">= 0"),
        ({"carbon_weight": "x"}, "placement.carbon_weight", "must be a number"),
        ({"cost_weight": True}, "placement.cost_weight", "must be a number"),
        ({"spread_min_regions": 3}, "placement.spread_min_regions", "only 2"),
        ({"divide": "random"}, "placement.divide", "'capacity' or 'weights'"),
        ({"colour": 1}, "placement.colour", "unknown key"),
    ],
)
def test_errors_name_file_key_and_reason(override, key, reason):
    with pytest.raises(ConfigError) as info:
        parse_federation(doc(**override), source="fed.yaml")
    assert info.value.path == "fed.yaml"
    assert info.value.key == key
    assert reason in info.value.reason
    assert str(info.value).startswith(f"fed.yaml: {key}: ")


def test_unreadable_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("clusters: [\n")
    with pytest.raises(ConfigError) as info:
        load_federation(path)
    assert info.value.path == str(path) and info.value.key.startswith("line ")


def test_partition_share_and_autonomy_window_are_read_and_checked():
    data = {"clusters": [{"name": "a", "region": "r", "partition_share": 0.7, "autonomy_window_s": 60}]}
    cluster = parse_federation(data).clusters[0]
    assert (cluster.partition_share, cluster.autonomy_window_s) == (0.7, 60.0)
    default = parse_federation({"clusters": [{"name": "a", "region": "r"}]}).clusters[0]
    assert (default.partition_share, default.autonomy_window_s) == (0.55, 300.0)
    cases = [({"partition_share": 1.5}, "partition_share"), ({"partition_share": 0}, "partition_share"),
             ({"autonomy_window_s": -1}, "autonomy_window_s"),
             ({"eviction_grace_s": -1}, "eviction_grace_s")]  # fmt: skip
    for bad, key in cases:
        with pytest.raises(ConfigError) as info:
            parse_federation({"clusters": [{"name": "a", "region": "r", **bad}]}, source="fed.yaml")
        assert info.value.key == f"clusters[0].{key}"
