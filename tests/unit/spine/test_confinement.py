"""User code confinement, the parts that need no process: the environment a unit starts with, the
isolation report, who may reach a path, private gids, where the cgroups are, and the settings."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from edgeplane_contract.messages import MessageError, NodeResources, RegisterV1, decode, encode

import edge_agent.confinement as confinement
from controlplane.errors import ConfigError
from edge_agent.cgroups import Hierarchy, UnitGroups, v1_mount, v2_own_dir
from edge_agent.cli import build_parser
from edge_agent.config import load_agent_config
from edge_agent.confinement import (
    MINIMAL_PATH,
    PRIVATE_GIDS,
    GroupPool,
    RunUser,
    blocked_at,
    build_env,
    gids_mapped,
    isolation_report,
    resolve_run_user,
    worker_python,
)


def test_a_unit_gets_its_own_env_and_the_edgeplane_variables_and_nothing_of_the_agents(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://hub:secret@db/edgeplane")
    env = build_env(
        {"GREETING": "hi", "EDGEPLANE_PLACEMENT_ID": "forged", "LANG": "de_DE.UTF-8"},
        home="/w/p1",
        edgeplane={"EDGEPLANE_PLACEMENT_ID": "p1", "CUDA_VISIBLE_DEVICES": "0"},
    )
    assert env == {
        "PATH": MINIMAL_PATH,
        "HOME": "/w/p1",
        "TMPDIR": "/w/p1",
        "LANG": "de_DE.UTF-8",  # its own env may change the defaults ...
        "GREETING": "hi",
        "EDGEPLANE_PLACEMENT_ID": "p1",  # ... but not the edgeplane variables
        "CUDA_VISIBLE_DEVICES": "0",
    }


def _groups(*hierarchies: Hierarchy, pids_max: int | None = 512) -> UnitGroups:
    return UnitGroups(list(hierarchies), pids_max=pids_max)


def test_the_report_says_what_is_enforced_as_strings():
    v2 = Hierarchy(root=Path("/sys/fs/cgroup/unified/edgeplane/n"), version=2, pids=False, kill=True)
    v1 = Hierarchy(root=Path("/sys/fs/cgroup/pids/edgeplane/n"), version=1, pids=True, kill=False)
    confined = isolation_report(
        run_user=RunUser("edgeplane-run", 999, 995),
        private_groups=True,
        no_new_privs=True,
        groups=_groups(v2, v1),
        cpu_quota="cgroup-v1",
        python_functions="other",
        seccomp="yes",
    )
    assert confined == {
        "clean_env": "yes",
        "run_as": "edgeplane-run",
        "work_dirs": "private-group",
        "no_new_privs": "yes",
        "cgroup": "v1+v2",
        "kill_tree": "cgroup",
        "pids_limit": "512",
        "cpu_quota": "cgroup-v1",
        "python_functions": "other",
        "seccomp": "yes",
    }
    bare = isolation_report(
        run_user=RunUser("agent-user"),
        private_groups=False,
        no_new_privs=False,
        groups=_groups(),
        cpu_quota="none",
        python_functions="yes",
        seccomp="none (libseccomp not found)",
    )
    assert (bare["run_as"], bare["work_dirs"], bare["cgroup"], bare["kill_tree"], bare["pids_limit"]) == (
        "agent-user",
        "agent-user",
        "none",
        "process-group",
        "none",
    )
    # A v2 group without the pids controller alone: processes are found, their number is not bounded.
    assert _groups(v2).pids_max is None


def test_a_path_is_reachable_only_through_searchable_directories():
    top = Path(tempfile.mkdtemp())  # under the system temp dir, which anyone may search
    try:
        os.chmod(top, 0o711)
        inner = top / "inner"
        inner.mkdir(mode=0o750)
        os.chmod(inner, 0o750)
        (inner / "file").write_text("x")
        os.chmod(inner / "file", 0o640)
        stranger, group = 2_000_000_123, os.stat(inner).st_gid
        assert blocked_at(inner / "file", uid=stranger, gids={group}, bits=4) is None
        assert blocked_at(inner / "file", uid=stranger, gids=set()) == f"{inner} is not searchable"
        assert "has mode -rw-r-----" in str(blocked_at(inner / "file", uid=stranger, gids={group}, bits=2))
        assert "No such file" in str(blocked_at(inner / "missing", uid=stranger, gids={group}))
        (inner / "sub").mkdir(mode=0o755)
        (inner / "sub" / "file").write_text("x")
        link = top / "link"
        link.symlink_to(inner / "sub")  # the directories on the way to the target count too
        assert blocked_at(link / "file", uid=stranger, gids=set(), bits=4) == f"{inner} is not searchable"
    finally:
        shutil.rmtree(top)


def test_private_gids_are_stable_per_key_shared_while_held_and_skip_named_groups():
    first, second = GroupPool(), GroupPool()
    gid = first.acquire("p1")
    assert gid in PRIVATE_GIDS and second.acquire("p1") == gid  # the same after an agent restart
    assert first.acquire("p1") == gid  # a second instance of one function version shares it
    tiny = GroupPool(range(10, 13), named=lambda g: g == 11)
    taken = {tiny.acquire(key) for key in ("a", "b")}
    assert taken == {10, 12}
    with pytest.raises(OSError, match="no free private gid"):
        tiny.acquire("c")
    tiny.release("a")
    assert tiny.acquire("c") in taken


def test_private_gids_must_be_mapped_in_the_user_namespace():
    assert gids_mapped("         0          0 4294967295\n", PRIVATE_GIDS)
    assert not gids_mapped("0 100000 65536\n", PRIVATE_GIDS)  # a rootless container


HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
SUBTREE = "60 50 0:40 /system.slice/edge.service /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"


def test_the_agents_own_v2_group_is_found_through_the_mount_it_is_seen_by():
    assert v2_own_dir(HYBRID, "8:pids:/\n0::/\n") == Path("/sys/fs/cgroup/unified")
    assert v2_own_dir(SUBTREE, "0::/system.slice/edge.service/agent\n") == Path("/sys/fs/cgroup/agent")
    assert v2_own_dir(SUBTREE, "0::/user.slice\n") is None  # not visible through that mount
    assert v2_own_dir(HYBRID, "8:pids:/\n") is None  # no v2 line: v1 only
    assert v1_mount(HYBRID, "pids") == Path("/sys/fs/cgroup/pids")
    assert v1_mount(HYBRID, "cpu") is None


def test_who_runs_user_code_when_the_agent_is_not_root_or_opts_out():
    user, notes = resolve_run_user("edgeplane-run", euid=1000)
    assert user == RunUser("agent-user") and not user.drops
    assert notes == ["the agent is not root: user code runs as the agent's user (uid 1000)"]
    for opt_out in ("", "agent"):
        user, notes = resolve_run_user(opt_out, euid=0)
        assert not user.drops and "by request" in notes[0]


def test_python_workers_use_another_interpreter_of_the_version_only_where_the_run_user_must(
    monkeypatch, tmp_path
):
    nobody = RunUser("nobody", 65534, 65534)
    hidden = tmp_path / "private" / "python"  # pytest's tmp_path is 0700: like a Python under /root
    hidden.parent.mkdir()
    monkeypatch.setattr(sys, "executable", str(hidden))
    own, why = worker_python(RunUser("agent-user"))  # nothing dropped: the agent's own, always
    assert own is not None and (own.executable, own.kind, why) == (str(hidden), "yes", None)
    monkeypatch.setattr(confinement.shutil, "which", lambda name, path: None)
    python, why = worker_python(nobody)
    assert python is None and why is not None and "is not searchable" in why
    monkeypatch.setattr(confinement.shutil, "which", lambda name, path: "/bin/sh")  # any reachable binary
    python, why = worker_python(nobody)
    assert python is not None and (python.executable, python.kind) == ("/bin/sh", "other")
    assert why and all(Path(entry).is_dir() for entry in python.path)


def test_the_worker_is_a_standard_library_script_installed_where_the_run_user_can_read_it():
    import ast

    tree = ast.parse(confinement.WORKER_SOURCE.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    root = Path(tempfile.mkdtemp(prefix="edgeplane-sandbox-"))
    try:
        root.chmod(0o711)
        nobody = RunUser("nobody", 65534, 65534)
        confined = confinement.Confinement(sandbox_root=root / "sandboxes", run_user=nobody)
        script = confined.worker_script()
        assert script.read_text() == confinement.WORKER_SOURCE.read_text()
        assert oct(script.stat().st_mode & 0o777) == oct(0o644)
        assert blocked_at(script, uid=65534, gids=set(), bits=4) is None
        confined.prune(keep=set())  # stale units go; the runtime stays
        assert script.exists()
        script.write_text("tampered")
        assert confined.worker_script().read_text() == confinement.WORKER_SOURCE.read_text()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_run_as_and_pids_max_are_settings_with_secure_defaults(tmp_path):
    defaults = load_agent_config(None, {"name": "n"})
    assert (defaults.run_as, defaults.pids_max) == ("edgeplane-run", 512)
    path = tmp_path / "agent.yaml"
    path.write_text("name: n\nrun_as: agent\npids_max: 64\n")
    configured = load_agent_config(str(path), {})
    assert (configured.run_as, configured.pids_max) == ("agent", 64)
    assert build_parser().parse_args(["run", "--run-as", ""]).run_as == ""
    assert load_agent_config(str(path), {"run_as": ""}).run_as == ""  # --run-as ''
    for text, key in (
        ("run_as: 'a b'\n", "run_as"),
        ("pids_max: 3\n", "pids_max"),
        ("pids_max: x\n", "pids_max"),
    ):
        path.write_text("name: n\n" + text)
        with pytest.raises(ConfigError) as info:
            load_agent_config(str(path), {})
        assert info.value.key == key


def test_registration_carries_the_isolation_report_and_older_agents_still_parse():
    message = RegisterV1(
        node="n1",
        cluster="c",
        boot_id="b",
        agent_version="0.1.0",
        resources=NodeResources(cpu=1.0, memory=2**30),
        heartbeat_interval_s=1.0,
        isolation={"run_as": "edgeplane-run", "pids_limit": "512"},
    )
    assert decode(encode(message), RegisterV1).isolation == {"run_as": "edgeplane-run", "pids_limit": "512"}
    older = encode(message).replace(b',"isolation":{"run_as":"edgeplane-run","pids_limit":"512"}', b"")
    assert b"isolation" not in older and decode(older, RegisterV1).isolation == {}
    with pytest.raises(MessageError) as info:
        decode(older.replace(b'"v":1', b'"isolation":{"pids_limit":512},"v":1'), RegisterV1)
    assert info.value.field == "isolation.pids_limit"
