"""User code runs confined: a clean environment, an unprivileged user when the agent is root, a
work dir no other workload may enter, and cgroups a stop empties and a fork bomb cannot outgrow.

Real parts only: nats-server, the hub with its API on SQLite, in-process agents and real ``sh``
and Python processes. What this machine cannot enforce is skipped, with the reason.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from pathlib import Path

import pytest
from harness import PYTHON_FUNCTIONS, running_agents, running_hub, wait_for

SECRET = "hunter2-agent-only"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie answers kill(0) but is dead
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


async def _value(value):
    return value


async def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _log(tmp_path: Path, node: str, placement_id: str) -> str:
    return (tmp_path / "agents" / node / "logs" / f"{placement_id}.log").read_text()


def _skip_unless(report: dict[str, str], key: str, wanted: str) -> None:
    """Skip a test of what only some machines have (the agent's start log says why not here)."""
    if report[key] != wanted:
        pytest.skip(f"needs {key}={wanted}; this machine gives {key}={report[key]}")


async def _invoke(api, name: str, event=None):
    async with api.session.post(f"{api.base}/v1/functions/{name}/invoke", json=event) as response:
        return response.status, await response.json()


async def _register(api, body) -> None:
    status, reply = await api.call("POST", "/v1/functions", body)
    assert status in (200, 201), reply


async def test_a_workload_sees_its_own_env_not_the_agents_and_the_hub_shows_the_isolation(
    nats_server, sqlite_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("EDGEPLANE_TEST_SECRET", SECRET)  # in the agent's (this process's) env
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        workload_id = await api.post_workload(
            {"name": "env", "command": ["sh", "-c", "env; pwd"], "env": {"OWN": "mine"}}
        )
        done = await api.wait_status(workload_id, "Succeeded", "Failed")
        assert done["status"] == "Succeeded", done
        placement_id = done["placements"][0]["id"]
        output = _log(tmp_path, "n1", placement_id)
        assert SECRET not in output
        env = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
        work = env["EDGEPLANE_WORK_DIR"]
        assert env["OWN"] == "mine" and env["EDGEPLANE_PLACEMENT_ID"] == placement_id
        assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        assert env["HOME"] == env["TMPDIR"] == work and output.splitlines()[-1] == work
        assert set(env) <= {
            "OWN",
            "PATH",
            "HOME",
            "TMPDIR",
            "LANG",
            "PWD",  # set by sh itself
            "EDGEPLANE_PLACEMENT_ID",
            "EDGEPLANE_WORKLOAD_ID",
            "EDGEPLANE_RESTARTS",
            "EDGEPLANE_WORK_DIR",
        }
        assert not Path(work).exists(), "the work dir goes with the placement"
        report = agents[0].agent.confinement.report
        node = await wait_for(lambda: api.get("/v1/nodes/n1"), lambda n: bool(n["isolation"]))
        assert node["isolation"] == report and report["clean_env"] == "yes"


async def test_as_root_user_code_runs_unprivileged_and_cannot_read_the_agents_files(
    nats_server, sqlite_url, tmp_path
):
    if os.geteuid() != 0:
        pytest.skip("the agent is not root here: user code runs as the agent's user")
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        report = agents[0].agent.confinement.report
        run_user = pwd.getpwnam(report["run_as"])
        agent_dir = tmp_path / "agents" / "n1"
        probe = (
            "id -u; grep -E '^(NoNewPrivs|Groups)' /proc/self/status; "
            'cat "$AGENT/placements.json" >/dev/null 2>&1 && echo READ-STATE || echo no-state; '
            'ls "$AGENT/logs" >/dev/null 2>&1 && echo READ-LOGS || echo no-logs'
        )
        workload_id = await api.post_workload(
            {"name": "who", "command": ["sh", "-c", probe], "env": {"AGENT": str(agent_dir)}}
        )
        done = await api.wait_status(workload_id, "Succeeded", "Failed")
        lines = _log(tmp_path, "n1", done["placements"][0]["id"]).split()
        assert int(lines[0]) == run_user.pw_uid != 0
        # No supplementary groups, no new privileges, none of the agent's files.
        assert lines[1:] == ["Groups:", "NoNewPrivs:", "1", "no-state", "no-logs"]
        assert report["run_as"] != "agent-user" and report["no_new_privs"] == "yes"


async def test_run_as_agent_is_an_explicit_opt_out_and_the_agent_says_so(
    nats_server, sqlite_url, tmp_path, caplog
):
    async with running_agents(
        nats_server.url, tmp_path, ["n1"], wait_registered=False, run_as="agent"
    ) as agents:
        assert agents[0].agent.confinement.report["run_as"] == "agent-user"
        assert agents[0].agent.confinement.report["clean_env"] == "yes"
    if os.geteuid() == 0:
        assert "runs as the agent's user (root), by request" in caplog.text


async def test_delete_kills_every_process_of_the_workload_a_setsid_grandchild_too(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        _skip_unless(agents[0].agent.confinement.report, "kill_tree", "cgroup")
        # The escaped child writes its own pid once it is in a new session (setsid may fork).
        escape = "setsid sh -c 'echo $$ > \"$OUT/escaped.pid\"; exec sleep 1000' & sleep 1000"
        workload_id = await api.post_workload(
            {"name": "escape", "command": ["sh", "-c", escape], "env": {"OUT": str(shared_dir)}}
        )
        text = await wait_for(lambda: _read(shared_dir / "escaped.pid"), lambda t: t.endswith("\n"))
        escaped = int(text)
        assert _alive(escaped) and os.getsid(escaped) == escaped  # its own session: not in the group
        status, _ = await api.call("DELETE", f"/v1/workloads/{workload_id}")
        assert status == 202
        await api.wait_status(workload_id, "Cancelled")
        await wait_for(lambda: _value(_alive(escaped)), lambda alive: not alive, timeout=5)


async def test_the_pids_limit_stops_a_fork_bomb_and_its_children_go_with_it(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"], pids_max=32) as agents,
    ):
        _skip_unless(agents[0].agent.confinement.report, "pids_limit", "32")
        bomb = "for i in $(seq 1000); do sleep 31.7 & done; echo all-started"
        workload_id = await api.post_workload({"name": "bomb", "command": ["sh", "-c", bomb]})
        done = await api.wait_status(workload_id, "Succeeded", "Failed", timeout=30)
        output = _log(tmp_path, "n1", done["placements"][0]["id"])
        assert done["status"] == "Failed" and "fork" in output.lower(), output  # EAGAIN
        assert "all-started" not in output

        def sleepers() -> int:
            count = 0
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError):
                    if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\x0031.7\x00":
                        count += 1
            return count

        await wait_for(lambda: _value(sleepers()), lambda n: n == 0, timeout=5)


async def test_one_workload_cannot_enter_another_workloads_work_dir_or_read_its_environment(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["n1"]) as agents,
    ):
        _skip_unless(agents[0].agent.confinement.report, "work_dirs", "private-group")
        env = {"OUT": str(shared_dir)}
        owner = (
            'echo mine > own; echo $$ > "$OUT/owner.pid"; '
            'echo "$EDGEPLANE_WORK_DIR" > "$OUT/owner.dir"; sleep 60'
        )
        first = await api.post_workload({"name": "owner", "command": ["sh", "-c", owner], "env": env})
        text = await wait_for(lambda: _read(shared_dir / "owner.dir"), lambda t: t.endswith("\n"))
        victim = Path(text.strip())
        intrude = (
            '{ echo x > "$VICTIM/planted"; } 2>/dev/null && echo WROTE || echo no-write; '
            'cat "$VICTIM/own" 2>/dev/null && echo READ || echo no-read; '
            'chmod 777 "$VICTIM" 2>/dev/null && echo CHMOD || echo no-chmod; '
            # Another unit's /proc entries need its gid too (ptrace access rules), not just its uid.
            'cat "/proc/$(cat "$OUT/owner.pid")/environ" >/dev/null 2>&1 && echo ENVIRON || echo no-proc'
        )
        second = await api.post_workload(
            {"name": "intruder", "command": ["sh", "-c", intrude], "env": {**env, "VICTIM": str(victim)}}
        )
        done = await api.wait_status(second, "Succeeded", "Failed")
        assert _log(tmp_path, "n1", done["placements"][0]["id"]).split() == [
            "no-write",
            "no-read",
            "no-chmod",
            "no-proc",
        ]
        assert (victim / "own").read_text() == "mine\n" and not (victim / "planted").exists()
        await api.call("DELETE", f"/v1/workloads/{first}")
        await api.wait_status(first, "Cancelled")


# A ``runtime: command`` function speaking the worker protocol in sh: it answers every request with
# its uid, its PATH and whatever it sees of the agent's secret.
PROTOCOL_SH = (
    "echo '{\"ready\": true}'; while read -r line; do "
    'id=$(echo "$line" | sed \'s/.*"id": *"\\([^"]*\\)".*/\\1/\'); '
    'printf \'{"id": "%s", "ok": true, "result": {"uid": %s, "path": "%s", "secret": "%s"}}\\n\' '
    '"$id" "$(id -u)" "$PATH" "$EDGEPLANE_TEST_SECRET"; done'
)
ENVIRON = "import os\ndef handle(event, context):\n    return {'env': dict(os.environ), 'uid': os.getuid()}\n"


async def test_function_workers_start_with_a_clean_env_as_the_run_user_too(
    nats_server, sqlite_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("EDGEPLANE_TEST_SECRET", SECRET)
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"]) as agents,
    ):
        confinement = agents[0].agent.confinement
        await _register(api, {"name": "shell", "runtime": "command", "command": ["sh", "-c", PROTOCOL_SH]})
        status, body = await _invoke(api, "shell", {"x": 1})
        assert status == 200, body
        assert (
            body["secret"] == ""
            and body["path"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        )
        assert body["uid"] == (confinement.run_user.uid if confinement.run_user.drops else os.geteuid())


async def test_a_python_function_gets_a_clean_env_and_only_what_the_worker_needs(
    nats_server, sqlite_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("EDGEPLANE_TEST_SECRET", SECRET)
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"], **PYTHON_FUNCTIONS) as agents,
    ):
        await _register(api, {"name": "environ", "source": ENVIRON, "handler": "handle", "env": {"OWN": "x"}})
        status, body = await _invoke(api, "environ")
        assert status == 200, body
        env = body["env"]
        assert SECRET not in str(env) and env["OWN"] == "x" and env["EDGEPLANE_FUNCTION"] == "environ"
        assert env["HOME"] == env["EDGEPLANE_WORK_DIR"] and env["PYTHONUNBUFFERED"] == "1"
        assert set(env) - {"PYTHONPATH"} == {
            "OWN",
            "PATH",
            "HOME",
            "TMPDIR",
            "LANG",
            "PYTHONUNBUFFERED",
            "EDGEPLANE_FUNCTION",
            "EDGEPLANE_VERSION",
            "EDGEPLANE_WORK_DIR",
        }
        confinement = agents[0].agent.confinement
        assert confinement.report["python_functions"] in ("yes", "other")
        if confinement.run_user.drops:
            assert body["uid"] == confinement.run_user.uid


async def test_where_the_run_user_cannot_run_python_python_functions_fail_and_say_why(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"]) as agents,
    ):
        _skip_unless(agents[0].agent.confinement.report, "python_functions", "no")
        await _register(api, {"name": "environ", "source": ENVIRON, "handler": "handle"})
        status, body = await _invoke(api, "environ")
        assert status == 502 and body["error"]["code"] == "init_error"
        assert "python functions cannot run as" in body["error"]["message"]
        assert not agents[0].agent.functions.instances


async def test_a_stopped_function_instance_takes_its_background_processes_along(
    nats_server, sqlite_url, tmp_path, shared_dir
):
    # One invocation, one instance: no headroom spare beside it (test_functions.py covers those).
    async with (
        running_hub(nats_server.url, sqlite_url, function_policy="edgeplane-no-headroom") as (_, api),
        running_agents(nats_server.url, tmp_path, ["f1"]) as agents,
    ):
        _skip_unless(agents[0].agent.confinement.report, "kill_tree", "cgroup")
        command = f'setsid sleep 1000 & echo $! > "{shared_dir}/fn.pid"; {PROTOCOL_SH}'
        await _register(api, {"name": "leaky", "runtime": "command", "command": ["sh", "-c", command]})
        status, _ = await _invoke(api, "leaky", {})
        assert status == 200
        escaped = int(await wait_for(lambda: _read(shared_dir / "fn.pid"), lambda t: t.endswith("\n")))
        assert _alive(escaped)
        pool = agents[0].agent.functions
        [instance] = list(pool.instances.values())
        await pool.stop_instance(instance, "test")
        await wait_for(lambda: _value(_alive(escaped)), lambda alive: not alive, timeout=5)
