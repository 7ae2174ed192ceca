"""User code runs under a seccomp filter: no new namespaces, while ordinary work still runs.

Issue 20, finding 8: a workload could create a user namespace (``unshare -U``) and ran with no
seccomp filter at all. Real parts only: nats-server, the hub with its API on SQLite, an agent
and real ``sh``/``unshare``/Python processes. Needs root (the agent then drops user code to its
run user, as in production) and a kernel and libseccomp that allow a filter; else skipped.
"""

from __future__ import annotations

import os

import pytest
from harness import CONFINED_PY, PYTHON_FUNCTIONS, running_agents, running_hub, wait_for

# Tries a user namespace through libc (os.unshare is Python 3.12+), then starts a thread and a
# child process: clone(2) without a namespace flag must still work (clone3 falls back to it).
PY_PROBE = """
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.unshare(0x10000000)
print("py-unshare", rc, os.strerror(ctypes.get_errno()) if rc else "created")
if hasattr(os, "unshare"):
    try:
        os.unshare(os.CLONE_NEWUSER)
        print("os-unshare created")
    except OSError as exc:
        print("os-unshare", exc.strerror)
box = []
thread = threading.Thread(target=box.append, args=("thread-ok",))
thread.start(); thread.join(); print(*box)
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork-ok", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""

# A function that tries the same from its worker (which runs handlers in a thread pool): in a
# child process, as a multithreaded process cannot unshare a user namespace anyway.
FUNCTION = """
import subprocess, threading
def handle(event, context):
    run = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True, timeout=10)
    box = []
    thread = threading.Thread(target=box.append, args=("thread-ok",))
    thread.start(); thread.join()
    return {"unshare_exit": run.returncode, "stderr": run.stderr.strip(), "thread": box}
"""


def _log(tmp_path, node: str, placement_id: str) -> str:
    return (tmp_path / "agents" / node / "logs" / f"{placement_id}.log").read_text()


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the agent then runs user code as its unprivileged run user")


def _require_filter(report: dict[str, str]) -> None:
    """Skip where this machine cannot filter (the report says why); a missing key is a failure."""
    state = report.get("seccomp", "missing from the isolation report")
    if state.startswith("none"):
        pytest.skip(f"no seccomp filter on this machine: {state}")
    assert state == "yes", report


async def test_a_workload_cannot_create_a_user_namespace_but_plain_work_threads_and_forks_run(
    nats_server, sqlite_url, tmp_path
):
    _require_root()
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        report = agents[0].agent.confinement.report
        _require_filter(report)
        script = 'echo plain-ok; unshare -U true; echo "unshare-exit=$?"'
        if CONFINED_PY is not None:
            script += f'; "{CONFINED_PY}" -c "$PROBE"'
        workload_id = await api.post_workload(
            {"name": "escape", "command": ["sh", "-c", script], "env": {"PROBE": PY_PROBE}}
        )
        done = await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30)
        output = _log(tmp_path, "n1", done["placements"][0]["id"])
        assert done["status"] == "Succeeded", (done, output)
        assert "plain-ok" in output
        assert "Operation not permitted" in output and "unshare-exit=0" not in output, output
        if CONFINED_PY is not None:
            assert "py-unshare -1 Operation not permitted" in output, output
            assert "os-unshare created" not in output
            assert "thread-ok" in output and "fork-ok 7" in output, output
        node = await wait_for(lambda: api.get("/v1/nodes/n1"), lambda n: bool(n["isolation"]))
        assert node["isolation"]["seccomp"] == "yes" and node["isolation"] == report


async def test_a_python_function_runs_under_the_filter_and_cannot_create_a_user_namespace(
    nats_server, sqlite_url, tmp_path
):
    _require_root()
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        _require_filter(agents[0].agent.confinement.report)
        status, reply = await api.call(
            "POST", "/v1/functions", {"name": "escape", "source": FUNCTION, "handler": "handle"}
        )
        assert status in (200, 201), reply
        status, body = await api.call("POST", "/v1/functions/escape/invoke", {}, timeout_s=30)
        assert status == 200, body
        assert body["unshare_exit"] != 0 and "Operation not permitted" in body["stderr"], body
        assert body["thread"] == ["thread-ok"]
