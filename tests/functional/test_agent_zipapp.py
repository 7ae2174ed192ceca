"""The edge agent as one file (``deploy/build_agent.py``): built once per session, copied nowhere
near the checkout, and run the way it runs on a box: a Python 3.11 outside any virtualenv, ``-I``
(no user site, no ``PYTHON*`` variables), ``env -i`` with a minimal PATH, an empty HOME and a
fresh current directory. It enrols with a join token, registers with a real hub over an
authenticating nats-server, and runs a workload to Succeeded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import SecuredNats, running_hub, secured_nats, wait_for

from controlplane.store.identities import IdentityStore

ROOT = Path(__file__).resolve().parents[2]
# Set it to a built artifact to skip the build (e.g. one CI step builds, the test reuses it).
PREBUILT = os.environ.get("EDGEPLANE_AGENT_PYZ")

pytestmark = pytest.mark.slow


def _box_python() -> str | None:
    """A Python of this minor version (the wheels inside are native) that is not a virtualenv's."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
        str(Path(sys.base_prefix) / "bin" / f"python{version}"),
    ]
    for candidate in candidates:
        if not os.access(candidate, os.X_OK):
            continue
        probe = subprocess.run(
            [candidate, "-I", "-c", "import sys; print(sys.prefix == sys.base_prefix)"],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin"},
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


@pytest.fixture(scope="session")
def agent_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact, built once for the session (about 30 s) under the session's tmp dir."""
    if PREBUILT:
        return Path(PREBUILT)
    out = tmp_path_factory.mktemp("agent-zipapp") / "edge-agent.pyz"
    built = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "build_agent.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[SecuredNats]:
    with secured_nats(tmp_path / "nats") as server:
        yield server


def _ready(nodes: list[dict[str, Any]]) -> bool:
    return any(n["name"] == "edge-pyz" and n["status"] == "Ready" for n in nodes)


async def test_the_one_file_agent_enrols_registers_and_runs_a_workload_in_a_clean_environment(
    agent_pyz: Path, secured: SecuredNats, sqlite_url: str, tmp_path: Path
) -> None:
    python = _box_python()
    if python is None:
        pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} outside a virtualenv")
    # The box: the artifact alone in a folder of its own, nothing of the checkout or the venv.
    box = tmp_path / "box"
    home, cwd = box / "home", box / "cwd"
    home.mkdir(parents=True)
    cwd.mkdir()
    artifact = box / "edge-agent.pyz"
    shutil.copy(agent_pyz, artifact)
    work = box / "agent"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}

    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, api):
        token = (await IdentityStore(running.hub.store).create_join_token("default", 300.0)).token
        log = (tmp_path / "agent.log").open("wb")
        agent = subprocess.Popen(
            ["env", "-i", *(f"{k}={v}" for k, v in env.items()), python, "-I", str(artifact), "run",
             "--name", "edge-pyz", "--join", token, "--hub", running.url, "--work-dir", str(work),
             "--heartbeat-interval", "0.25", "--cpu", "1", "--memory", "1Gi",
             "--power-supply-path", str(box / "no-power-supply")],
            cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            # The first start unpacks the dependencies into HOME/.cache/edge-agent: give it time.
            await wait_for(api.nodes, _ready, timeout=90, every=0.25)
            workload = await api.post_workload(
                {
                    "name": "from-pyz",
                    "command": ["sh", "-c", "echo hi"],
                    "resources": {"cpu": 0.5, "memory": "64Mi"},
                }
            )
            done = await api.wait_status(workload, "Succeeded", "Failed", timeout=60)
            assert done["status"] == "Succeeded", done
            assert agent.poll() is None, "the agent exited"
            # It ran from the artifact: its dependencies were unpacked under the empty HOME, and
            # the process saw none of the test's environment.
            unpacked = list(home.glob(".cache/edge-agent/edge-agent.pyz_*/site-packages/edge_agent"))
            assert unpacked, sorted(p.name for p in home.rglob("*"))[:20]
            environ = Path(f"/proc/{agent.pid}/environ").read_bytes().split(b"\0")
            assert not [e for e in environ if e.startswith((b"VIRTUAL_ENV=", b"PYTHONPATH="))]
            # The native wheels load from there too: the local policy (onnxruntime) answered the bid.
            maps = Path(f"/proc/{agent.pid}/maps").read_text()
            assert f"{home}/.cache/edge-agent/" in maps and "onnxruntime" in maps
            assert (work / "credentials.json").exists()  # enrolled: later starts need no token
        finally:
            agent.terminate()
            try:
                agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
            log.close()
        text = (tmp_path / "agent.log").read_text(errors="replace")
        assert token not in text  # the join token is never logged
        assert agent.returncode == 0, text[-3000:]  # SIGTERM: a clean stop
