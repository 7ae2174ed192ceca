"""The API fuzzed against its own OpenAPI document, as a user runs it: ``controlplane up``, then
schemathesis over every operation with a fixed seed and a bounded number of cases.

The checks: no server error, every status documented, every body valid against the documented
schema, every content type as documented. Any failure fails the test and is printed in full.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.natsd import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SEED = 20261203
# Cases per operation and phase: about 1,400 cases in all, 15-25 s wall on two cores.
MAX_EXAMPLES = 50
CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "response_schema_conformance",
        "content_type_conformance",
    )
)
SCHEMATHESIS = "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())"
# A 500 is always a bug. 502-504 are answers the document lists where they happen (a function that
# failed or cannot start, no capacity, a timeout); status_code_conformance holds them to that.
CONFIG = """
[checks.not_a_server_error]
expected-statuses = ["1xx", "2xx", "3xx", "4xx", "502", "503", "504"]
"""


@dataclass
class Up:
    base: str
    data_dir: Path
    log: Path

    def token(self) -> str | None:
        """The admin token ``up`` writes (mode 0600) where the API requires one; else None."""
        path = self.data_dir / "admin.token"
        return path.read_text().strip() if path.exists() else None


def _health(base: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture
def hub_up(tmp_path: Path) -> Iterator[Up]:
    """``controlplane up --agents 1`` in its own process, once /healthz answers 200."""
    port = free_port()
    up = Up(f"http://127.0.0.1:{port}", tmp_path / "data", tmp_path / "up.log")
    command = [sys.executable, "-m", "controlplane.cli", "up", "--agents", "1", "--port", str(port)]
    # No rate limit: the fuzzer is one admin sending a few hundred requests a second.
    command += ["--data-dir", str(up.data_dir), "--log-level", "WARNING", "--rate-limit", "0"]
    with up.log.open("w") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "EDGEPLANE_DATABASE_URL": "", "EDGEPLANE_NATS_URL": ""},
        )
    try:
        deadline = time.monotonic() + 60
        # up writes the admin token just after the API answers: wait for both, or the fuzzer
        # would load the document without a token (a 401, "Schema Loading Error").
        while _health(up.base) != 200 or up.token() is None:
            assert process.poll() is None, f"controlplane up exited:\n{up.log.read_text()}"
            assert time.monotonic() < deadline, f"/healthz not 200 within 60 s:\n{up.log.read_text()}"
            time.sleep(0.2)
        yield up
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_fuzzing_every_operation_against_the_document_finds_nothing(hub_up: Up, tmp_path: Path):
    report = tmp_path / "schemathesis.json"
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    arguments = [
        "--config-file",
        str(config),
        "run",
        f"{hub_up.base}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "2",
        "--request-timeout",
        "30",
        "--no-color",
        "--generation-database",
        "none",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    token = hub_up.token()
    headers = ["-H", f"Authorization: Bearer {token}"] if token else []
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-c", SCHEMATHESIS, *arguments, *headers],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    wall_s = time.monotonic() - started
    assert report.exists(), (
        f"schemathesis wrote no report (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    )
    result = json.loads(report.read_text())
    # Seen once in a full local run (not reproduced alone): a report without operation counts.
    # Fail with what schemathesis said rather than a TypeError.
    assert isinstance(result.get("operations"), dict) and result["operations"].get("tested"), (
        f"schemathesis report without operation counts (exit {run.returncode}):\n"
        f"{json.dumps(result)[:3000]}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    cases = result["test_cases"]["generated"]
    operations = result["operations"]
    failures = result["failures"] + result["errors"]
    print(
        f"\nschemathesis {result['schemathesis_version']}: {cases} cases over {operations['tested']}/"
        f"{operations['total']} operations, {len(failures)} failures, {wall_s:.1f} s wall "
        f"(seed {SEED}, max {MAX_EXAMPLES} examples per operation and phase)\n"
        f"  st {' '.join(arguments)}" + (" -H 'Authorization: Bearer <admin.token>'" if token else "")
    )
    if failures or run.returncode != 0:
        print(run.stdout[-30_000:], run.stderr[-5_000:], sep="\n")
        print(hub_up.log.read_text()[-10_000:])
    assert operations["tested"] == operations["selected"] == operations["total"], operations
    assert cases > 0
    assert not failures, f"{len(failures)} failures (printed above)"
    assert run.returncode == 0, run.stdout[-5_000:]
    assert _health(hub_up.base) == 200, "the hub is still healthy after the fuzzing"
