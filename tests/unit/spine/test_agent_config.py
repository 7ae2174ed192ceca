"""Agent configuration: file plus flags, with errors naming file, key and reason."""

from __future__ import annotations

import pytest

from controlplane.errors import ConfigError
from edge_agent.config import load_agent_config


def test_flags_override_the_file(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text(
        "name: from-file\ncluster: c1\nheartbeat_interval_s: 5\ncapacity: {cpu: 2, memory: 1Gi}\n"
    )
    config = load_agent_config(str(path), {"name": "from-flag", "cluster": None})
    assert (config.name, config.cluster, config.heartbeat_interval_s) == ("from-flag", "c1", 5.0)
    assert (config.cpu, config.memory) == (2.0, 2**30)
    assert config.work_dir.endswith("from-flag")


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("name: n\nbogus: 1\n", "bogus", "unknown key"),
        ("name: n\nnats_url: http://x\n", "nats_url", "nats://"),
        ("name: 'a.b'\n", "name", "must match"),
        ("cluster: c\n", "name", "is required"),
        ("name: n\ncapacity: {memory: lots}\n", "capacity.memory", "cannot parse"),
        ("name: n\nnode_type: phone\n", "node_type", "must be one of"),
        ("name: [unclosed\n", "<file>", "not valid YAML"),
        ("name: n\nrestart_backoff_s: -1\n", "restart_backoff_s", "between"),
        ("name: n\nrestart_backoff_s: fast\n", "restart_backoff_s", "between"),
        ("name: n\nrestart_backoff_s: 10\nrestart_backoff_max_s: 5\n", "restart_backoff_max_s", ">="),
        ("name: n\noffline_scale_interval_s: 0\n", "offline_scale_interval_s", "between"),
        ("name: n\ncpu_limits: maybe\n", "cpu_limits", "true or false"),
        ("name: n\ncgroup_root: relative/dir\n", "cgroup_root", "absolute path"),
    ],
)
def test_bad_files_name_the_file_key_and_reason(tmp_path, text, key, reason):
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_agent_config(str(path), {})
    assert info.value.path == str(path) and info.value.key == key and reason in info.value.reason


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_agent_config(str(tmp_path / "nope.yaml"), {"name": "n"})
    assert info.value.key == "<file>" and "cannot read" in info.value.reason


def test_restart_backoff_and_offline_interval_have_defaults_and_can_be_set(tmp_path):
    defaults = load_agent_config(None, {"name": "n"})
    assert (defaults.restart_backoff_s, defaults.restart_backoff_max_s) == (1.0, 60.0)
    assert defaults.offline_scale_interval_s == 10.0
    path = tmp_path / "agent.yaml"
    path.write_text(
        "name: n\nrestart_backoff_s: 0.5\nrestart_backoff_max_s: 8\noffline_scale_interval_s: 2\n"
    )
    config = load_agent_config(str(path), {})
    assert (config.restart_backoff_s, config.restart_backoff_max_s, config.offline_scale_interval_s) == (
        0.5,
        8,
        2,
    )


def test_cpu_limits_are_on_by_default_and_can_be_switched_off(tmp_path):
    defaults = load_agent_config(None, {"name": "n"})
    assert (defaults.cpu_limits, defaults.cgroup_root) == (True, "")
    path = tmp_path / "agent.yaml"
    path.write_text("name: n\ncpu_limits: false\ncgroup_root: /sys/fs/cgroup/edge.slice/work\n")
    config = load_agent_config(str(path), {})
    assert (config.cpu_limits, config.cgroup_root) == (False, "/sys/fs/cgroup/edge.slice/work")
