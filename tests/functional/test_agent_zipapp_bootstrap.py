"""The one-file agent's format without pip or a network (``deploy/build_agent.py``'s
``write_zipapp``): a staged site-packages folder becomes an executable zip that unpacks itself
once into ``~/.cache/edge-agent`` (or ``EDGE_AGENT_ROOT``), loads what pip's ``.pth`` files add,
and runs ``edge_agent.cli:main`` with the standard library alone (no shiv)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _build_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_agent", ROOT / "deploy" / "build_agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _staged(site: Path) -> Path:
    """A stand-in for pip's --target folder: an ``edge_agent.cli`` and a ``.pth`` that adds a dir."""
    (site / "edge_agent").mkdir(parents=True)
    (site / "edge_agent" / "__init__.py").write_text("")
    (site / "edge_agent" / "cli.py").write_text(
        "import sys, extra_mod\n"
        "def main():\n"
        "    print('agent', sys.argv[1:], extra_mod.WHERE, __file__)\n"
        "    return 3\n"
    )
    (site / "extra").mkdir()
    (site / "extra" / "extra_mod.py").write_text("WHERE = 'from-pth'\n")
    (site / "extra.pth").write_text("extra\n")
    return site


def _run(artifact: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(artifact), "run", "--name", "x"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_zipapp_unpacks_once_and_runs_the_agents_main_without_shiv(tmp_path: Path) -> None:
    build = _build_agent()
    site = _staged(tmp_path / "site")
    artifact = build.write_zipapp(site, tmp_path / "dist" / "edge-agent.pyz")
    assert artifact.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    home = tmp_path / "home"
    home.mkdir()
    first = _run(artifact, home)
    assert first.returncode == 3, first.stderr  # the entry point's exit status
    assert "agent ['run', '--name', 'x'] from-pth" in first.stdout, first.stdout
    unpacked = list((home / ".cache" / "edge-agent").glob("edge-agent.pyz_*/site-packages/edge_agent/cli.py"))
    assert len(unpacked) == 1 and str(unpacked[0]) in first.stdout
    # Later starts use the copy; a rebuild of the same inputs is the same file (reproducible).
    again = _run(artifact, home)
    assert again.returncode == 3 and again.stdout == first.stdout
    rebuilt = build.write_zipapp(site, tmp_path / "dist2" / "edge-agent.pyz")
    assert rebuilt.read_bytes() == artifact.read_bytes()
    # New contents are a new build id: unpacked beside the old one, never mixed with it.
    (site / "extra" / "extra_mod.py").write_text("WHERE = 'second build'\n")
    build.write_zipapp(site, artifact)
    changed = _run(artifact, home)
    assert "second build" in changed.stdout, changed.stderr
    assert len(list((home / ".cache" / "edge-agent").glob("edge-agent.pyz_*"))) == 2
    elsewhere = _run(artifact, home, EDGE_AGENT_ROOT=str(tmp_path / "root"))
    assert elsewhere.returncode == 3 and str(tmp_path / "root") in elsewhere.stdout


def test_concurrent_first_starts_share_one_unpacked_copy(tmp_path: Path) -> None:
    artifact = _build_agent().write_zipapp(_staged(tmp_path / "site"), tmp_path / "edge-agent.pyz")
    home = tmp_path / "home"
    home.mkdir()
    starts = [
        subprocess.Popen(
            [sys.executable, "-I", str(artifact)],
            env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [start.communicate(timeout=60) for start in starts]
    assert [start.returncode for start in starts] == [3] * 4, outputs
    root = home / ".cache" / "edge-agent"
    assert [p.name.split("_")[0] for p in root.iterdir()] == ["edge-agent.pyz"]  # no staging left
