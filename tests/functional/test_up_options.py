"""``controlplane up``'s port options as an operator uses them (issue 22, item 5): the embedded
NATS server's port (``--nats-port``), the local agents' /metrics (``--agent-metrics``), and the
hub's own process and build metrics; a bad or taken port is one line before anything starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from functools import partial
from pathlib import Path

from harness import poll

from controlplane import __version__
from controlplane.natsd import free_port

_poll = partial(poll, timeout=30.0, every=0.2)
_ENV = {**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""}


def _text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def _up(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "controlplane.cli", "up", "--log-level", "ERROR",
            "--data-dir", str(tmp_path / "data"), *extra]  # fmt: skip


def test_up_puts_nats_and_the_agents_metrics_on_the_ports_asked_and_the_hub_exports_process_metrics(
    tmp_path: Path,
) -> None:
    api, nats, metrics = free_port(), free_port(), free_port()
    up = subprocess.Popen(
        _up(tmp_path, "--agents", "1", "--port", str(api), "--nats-port", str(nats),
            "--agent-metrics", str(metrics), "--public-metrics"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_ENV, text=True,
    )  # fmt: skip
    try:
        assert up.stdout is not None
        banner = [up.stdout.readline() for _ in range(7)]
        assert f"NATS nats://127.0.0.1:{nats}" in banner[0], banner
        announced = [line for line in banner if "/metrics" in line]
        assert announced and f"127.0.0.1:{metrics}" in announced[0], banner
        # The agent serves its metrics there once it runs; the hub exports process_* and its build.
        agent = _poll(lambda: _text(f"http://127.0.0.1:{metrics}/metrics"), lambda t: "edgeplane_agent" in t)
        assert "edgeplane_agent_hub_reachable" in agent
        hub = _text(f"http://127.0.0.1:{api}/metrics")
        assert "process_cpu_seconds_total " in hub and "process_resident_memory_bytes " in hub
        assert f'version="{__version__}"' in next(
            line for line in hub.splitlines() if line.startswith("edgeplane_build_info{")
        )
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=30)
    assert code == 0


def test_a_bad_or_taken_port_stops_up_at_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--nats-port", str(port)], f"--nats-port: 127.0.0.1:{port} is not free"),
            (["--nats-port", "70000"], "--nats-port: must be between 1 and 65535, got 70000"),
            (["--nats-port", "4222", "--nats", "nats://127.0.0.1:4222"], "--nats-port: sets the embedded"),
            (["--agents", "2", "--agent-metrics", str(port - 1)], f"127.0.0.1:{port} is not free"),
            (["--agents", "1", "--agent-metrics", "0"], "--agent-metrics: must be between 1 and 65535"),
        ]
        _each_stops_up_at_start_with_one_line(tmp_path, cases)


def _each_stops_up_at_start_with_one_line(tmp_path: Path, cases: list[tuple[list[str], str]]) -> None:
    """``up`` with each case's options exits 2 before starting anything, with one line that
    names the problem."""
    for extra, expected in cases:
        result = subprocess.run(
            _up(tmp_path, "--port", "0", *extra), capture_output=True, text=True, timeout=60, env=_ENV
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (extra, result.stderr)
        assert lines[0].startswith("controlplane up: configuration error: ") and expected in lines[0], lines


def test_up_with_a_nats_cluster_and_sites_runs_each_sites_agents_behind_its_leaf_node(tmp_path: Path) -> None:
    """``up --nats-cluster 3 --sites 2``: three hub-side nats-servers, a leaf server per site, the
    agents spread over the sites and connected to their own site's leaf; work pinned to a site
    runs there."""
    import json

    api = free_port()
    up = subprocess.Popen(
        _up(tmp_path, "--agents", "2", "--port", str(api), "--nats-cluster", "3", "--sites", "2"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_ENV, text=True,
    )  # fmt: skip
    try:
        assert up.stdout is not None
        banner = [up.stdout.readline() for _ in range(7)]
        assert banner[0].count("nats://127.0.0.1:") == 3, banner
        assert any("3 hub-side servers" in line and "site-1 nats://" in line for line in banner), banner
        token = (tmp_path / "data" / "admin.token").read_text().strip()

        def call(method: str, path: str, body: object = None) -> dict[str, object]:
            request = urllib.request.Request(
                f"http://127.0.0.1:{api}{path}",
                method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return dict(json.loads(response.read()))

        nodes = _poll(
            lambda: call("GET", "/v1/nodes")["items"],
            lambda items: len(items) == 2 and all(n["status"] == "Ready" for n in items),
        )
        assert {n["cluster"] for n in nodes} == {"site-1", "site-2"}
        # Only through their sites' leaf servers: the hub-side servers admit the hub and the two
        # sites' leaf connections, no agent; each leaf server admits its own site's agent.
        data = tmp_path / "data" / "nats"
        assert (data / "nats-core-0.conf").read_text().count('"nkey"') == 3
        for site in ("site-1", "site-2"):
            assert (data / f"nats-site-{site}.conf").read_text().count('"nkey"') == 1
        created = call(
            "POST",
            "/v1/workloads",
            {"name": "at-site-2", "command": ["true"], "affinity": {"clusters": ["site-2"]}},
        )
        done = _poll(
            lambda: call("GET", f"/v1/workloads/{created['id']}"), lambda w: w["status"] == "Succeeded"
        )
        assert next(n for n in nodes if n["name"] == done["node"])["cluster"] == "site-2"
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=30)
    assert code == 0


def test_the_topology_options_are_checked_at_start(tmp_path: Path) -> None:
    cases = [
        (["--sites", "9"], "--sites: must be between 1 and 8, got 9"),
        (["--nats-cluster", "0"], "--nats-cluster: must be between 1 and 5, got 0"),
        (
            ["--sites", "2", "--nats", "nats://127.0.0.1:4222"],
            "--sites: starts its own nats-servers: not with --nats",
        ),
        (["--sites", "2", "--federation", "fed.yaml"], "--sites: makes the federation"),
    ]
    _each_stops_up_at_start_with_one_line(tmp_path, cases)
