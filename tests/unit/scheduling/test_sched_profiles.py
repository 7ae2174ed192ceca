"""Profiles are configuration: built-ins load, files load, errors name source, key and reason."""

from __future__ import annotations

import pytest

from controlplane.errors import ConfigError
from controlplane.scheduling.framework import Status
from controlplane.scheduling.plugins.registry import REGISTRY, register
from controlplane.scheduling.profiles import BUILTIN_PROFILES, load_profile, parse_profile
from controlplane.scheduling.scheduler import Scheduler


@pytest.mark.parametrize("name", sorted(BUILTIN_PROFILES))
def test_builtin_profiles_build_a_scheduler(name):
    sched = Scheduler(name)
    assert sched.profile.name == name


def test_default_profile_uses_upstream_weights():
    weights = {p.name: p.weight for p in load_profile("default").plugins}
    assert weights["NodeResourcesLeastAllocated"] == 1
    assert weights["NodeResourcesBalancedAllocation"] == 1
    assert weights["PodTopologySpread"] == 2
    assert weights["NodeAffinity"] == 2


def test_edgeplane_fixed_only_turns_adaptive_weights_off():
    a, b = load_profile("edgeplane"), load_profile("edgeplane-fixed")
    assert b.reward["adaptive"]["enabled"] is False
    assert [p.name for p in a.plugins] == [p.name for p in b.plugins]


def test_profile_file_loads(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: mine\nplugins:\n  - NodeReady\n  - name: NodeResourcesMostAllocated\n    weight: 3\n"
    )
    profile = load_profile(str(path))
    assert profile.name == "mine" and profile.plugins[1].weight == 3


@pytest.mark.parametrize(
    ("doc", "key", "reason"),
    [
        ({"name": "x", "plugins": [{"name": "Nope"}]}, "plugins[0].name", "unknown plugin"),
        ({"name": "x", "plugins": [{"name": "NodeReady", "weight": -1}]}, "plugins[0].weight", ">= 0"),
        ({"name": "x", "plugins": ["NodeReady", "NodeReady"]}, "plugins[1].name", "listed twice"),
        (
            {"name": "x", "plugins": ["NodeReady"], "action_space": {"accelerator_policy": "x"}},
            "action_space.accelerator_policy",
            "must be one of",
        ),
        ({"name": "x", "plugins": ["NodeReady"], "colour": 1}, "colour", "unknown key"),
        ({"name": "x", "plugins": ["NodeReady"], "reward": {"knee": 3}}, "reward", "knee"),
        ({"plugins": ["NodeReady"]}, "name", "non-empty"),
    ],
)
def test_profile_errors_name_source_key_and_reason(doc, key, reason):
    with pytest.raises(ConfigError) as info:
        parse_profile(doc, source="p.yaml")
    assert info.value.path == "p.yaml"
    assert info.value.key == key
    assert reason in info.value.reason


def test_bad_plugin_args_fail_when_the_scheduler_is_built():
    doc = {"name": "x", "plugins": [{"name": "VolcanoBinpack", "args": {"cpux": 1}}]}
    with pytest.raises(ConfigError) as info:
        Scheduler(doc)
    assert info.value.key == "plugins[0].args"
    assert "unknown arg 'cpux'" in info.value.reason


def test_missing_profile_file_is_a_config_error():
    with pytest.raises(ConfigError, match="no such profile"):
        load_profile("/nonexistent/profile.yaml")


def test_out_of_tree_plugins_register_by_name(mk):
    class Always:
        name = "Always"

        def score(self, state, request, cand):
            return cand.cpu * 0 + 50.0

    register("TestAlways", lambda args, handle: Always(), replace=True)
    try:
        s = Scheduler({"name": "learned", "plugins": ["NodeReady", "NodeResourcesFit", "TestAlways"]})
        s.upsert_node(mk.cpu_node("a"))
        assert s.schedule(mk.request("w")).status == Status.success()
        with pytest.raises(ValueError, match="already registered"):
            register("TestAlways", lambda args, handle: Always())
    finally:
        REGISTRY.pop("TestAlways", None)
