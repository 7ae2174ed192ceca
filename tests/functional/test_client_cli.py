"""The client commands (``get``, ``describe``, ``apply``, ``delete``, ``invoke``, ``top``) as a
user runs them: separate processes against a real hub and agents, with the config file that
``controlplane up`` writes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import yaml
from harness import PYTHON_FUNCTIONS, client_cli, running_agents, running_hub

from controlplane.client.config import write_client_config
from controlplane.natsd import free_port
from controlplane.store.identities import IdentityStore

SPEC = """\
kind: Function
name: echo
source: |
  def handle(event, context):
      if event.get("fail"):
          raise ValueError("asked to fail")
      return event
handler: handle
---
name: hello-cli
command: [sh, -c, echo hi]
resources: {cpu: 0.5, memory: 64Mi}
"""


async def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # The hub serves from this event loop: the child must not block it.
    return await asyncio.to_thread(client_cli, cwd, *argv)


async def test_the_client_lists_applies_describes_invokes_and_deletes(nats_server, sqlite_url, tmp_path):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["edge-a", "edge-b"], **PYTHON_FUNCTIONS),
    ):
        admin = await IdentityStore(running.hub.store).create_api_token("cli", ["admin"])
        data_dir = tmp_path / ".edgeplane"
        data_dir.mkdir()
        (data_dir / "admin.token").write_text(admin.token + "\n")
        write_client_config(data_dir, running.url, data_dir / "admin.token")
        (tmp_path / "app.yaml").write_text(SPEC)

        nodes = await _run(tmp_path, "get", "nodes")
        assert nodes.returncode == 0, nodes.stderr
        header, *rows = nodes.stdout.splitlines()
        assert header.split()[:3] == ["NAME", "STATUS", "CLUSTER"]
        assert sorted(r.split()[:2] for r in rows) == [["edge-a", "Ready"], ["edge-b", "Ready"]]
        as_json = await _run(tmp_path, "get", "node", "edge-a", "-o", "json")
        assert json.loads(as_json.stdout)["name"] == "edge-a"

        applied = await _run(tmp_path, "apply", "-f", "app.yaml")
        assert applied.returncode == 0, applied.stderr
        lines = applied.stdout.splitlines()
        assert lines[0] == "function/echo created (version 1)"
        assert lines[1].startswith("workload/hello-cli created (id ")
        workload_id = lines[1].rsplit(" ", 1)[1].rstrip(")")
        await api.wait_status(workload_id, "Succeeded")

        listed = await _run(tmp_path, "get", "workloads", "-o", "yaml")
        assert [w["id"] for w in yaml.safe_load(listed.stdout)] == [workload_id]
        described = await _run(tmp_path, "describe", "workload", workload_id)
        assert described.returncode == 0, described.stderr
        page = described.stdout
        assert "Status:" in page and "Succeeded" in page and "Placement explanation:" in page
        assert "nodes: 2 in total, 2 feasible" in page and "chosen" in page, page
        node = await _run(tmp_path, "describe", "node", "edge-a")
        assert "Capacity and allocation:" in node.stdout and "Isolation:" in node.stdout, node.stdout
        top = await _run(tmp_path, "top", "nodes")
        assert top.returncode == 0 and "CPU (ALLOC/CAP)" in top.stdout and "edge-b" in top.stdout, top.stdout

        invoked = await _run(tmp_path, "invoke", "echo", "--data", '{"hi": 1}')
        assert (invoked.returncode, invoked.stdout) == (0, '{"hi": 1}\n'), invoked.stderr
        failed = await _run(tmp_path, "invoke", "echo", "--data", '{"fail": true}')
        assert failed.returncode == 1 and "ValueError: asked to fail" in failed.stderr, failed.stderr
        functions = await _run(tmp_path, "get", "functions")
        assert functions.stdout.splitlines()[1].split()[:3] == ["echo", "1", "python"], functions.stdout
        again = await _run(tmp_path, "apply", "-f", "app.yaml")
        assert again.stdout.splitlines()[0] == "function/echo unchanged (version 1)"

        # Refusals: the API's message and field, a non-zero exit, the other documents still sent.
        (tmp_path / "bad.json").write_text(
            json.dumps(
                [
                    {"name": "bad", "command": ["true"], "resources": {"cpu": -1}},
                    {"name": "ok", "command": ["true"]},
                ]
            )
        )
        bad = await _run(tmp_path, "apply", "-f", "bad.json")
        assert bad.returncode == 1
        assert "must be a positive number of cores (field: resources.cpu)" in bad.stderr, bad.stderr
        assert bad.stdout.startswith("workload/ok created"), bad.stdout
        missing = await _run(tmp_path, "delete", "function", "nope")
        assert missing.returncode == 1
        assert missing.stderr.strip() == (
            "controlplane delete: function 'nope' not found (field: name) [HTTP 404 not_found]"
        )

        deleted = await _run(tmp_path, "delete", "function", "echo")
        assert (deleted.returncode, deleted.stdout) == (0, "function/echo deleted\n")
        gone = await _run(tmp_path, "invoke", "echo")
        assert gone.returncode == 1 and "not found" in gone.stderr
        stopped = await _run(tmp_path, "delete", "workload", workload_id)
        assert stopped.returncode == 0 and stopped.stdout.startswith(f"workload/{workload_id} deleted")
        events = await _run(tmp_path, "get", "events", "--limit", "3", "--kind", "ApiCall")
        assert len(events.stdout.splitlines()) == 4 and "DELETE /v1/workloads" in events.stdout, events.stdout

        # A token the hub does not know: refused, and never shown.
        (tmp_path / "wrong.token").write_text("ep_not-a-real-token-123\n")
        refused = await _run(tmp_path, "get", "nodes", "-v", "--token-file", "wrong.token")
        assert refused.returncode == 1 and "[HTTP 401 unauthorized]" in refused.stderr
        assert "not-a-real-token" not in refused.stdout + refused.stderr
        assert admin.token not in "".join(r.stdout + r.stderr for r in (nodes, bad, refused, failed))


def test_a_missing_config_names_the_files_it_looked_for(tmp_path):
    default = client_cli(tmp_path, "get", "nodes")
    assert default.returncode == 1
    assert str(tmp_path / ".edgeplane" / "client.yaml") in default.stderr
    assert str(tmp_path / ".config" / "edgeplane" / "client.yaml") in default.stderr
    assert "controlplane up" in default.stderr and len(default.stderr.splitlines()) == 1
    explicit = client_cli(tmp_path, "top", "nodes", "--config", "elsewhere.yaml")
    assert explicit.returncode == 1 and "elsewhere.yaml (from --config)" in explicit.stderr
    from_env = client_cli(tmp_path, "get", "nodes", env={"EDGEPLANE_CONFIG": str(tmp_path / "env.yaml")})
    assert f"{tmp_path / 'env.yaml'} (from $EDGEPLANE_CONFIG)" in from_env.stderr


def test_an_unreachable_hub_is_one_line_without_the_token(tmp_path):
    data_dir = tmp_path / ".edgeplane"
    data_dir.mkdir()
    (data_dir / "admin.token").write_text("ep_secret-token-456\n")
    url = f"http://127.0.0.1:{free_port()}"
    config = write_client_config(data_dir, url, data_dir / "admin.token")
    assert config.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(config.read_text()) == {"url": url, "token_file": "admin.token"}
    result = client_cli(tmp_path, "get", "workloads", "-v", "--timeout", "5")
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert (
        last.startswith("controlplane get: cannot reach the hub at http://127.0.0.1:") and "refused" in last
    )
    assert "secret-token" not in result.stdout + result.stderr


async def test_get_workloads_lists_the_newest_first_with_filters_and_paging(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url) as (running, api),
        running_agents(nats_server.url, tmp_path, ["edge-a"]),
    ):
        admin = await IdentityStore(running.hub.store).create_api_token("cli", ["admin"])
        data_dir = tmp_path / ".edgeplane"
        data_dir.mkdir()
        (data_dir / "admin.token").write_text(admin.token + "\n")
        write_client_config(data_dir, running.url, data_dir / "admin.token")
        first = await api.post_workload({"name": "first", "command": ["true"]})
        await api.wait_status(first, "Succeeded")
        second = await api.post_workload({"name": "second", "command": ["true"]})
        await api.wait_status(second, "Succeeded")
        # More cores than any node has: it stays Pending.
        third = await api.post_workload({"name": "third", "command": ["true"], "resources": {"cpu": 512}})

        def ids(done: subprocess.CompletedProcess[str]) -> list[str]:
            assert done.returncode == 0, done.stderr
            return [line.split()[0] for line in done.stdout.splitlines()[1:]]

        listed = await _run(tmp_path, "get", "workloads")
        assert ids(listed) == [third, second, first], listed.stdout
        assert listed.stderr == ""
        succeeded = await _run(tmp_path, "get", "workloads", "--status", "Succeeded")
        assert ids(succeeded) == [second, first], succeeded.stdout
        assert ids(await _run(tmp_path, "get", "workloads", "--name", "first")) == [first]
        assert ids(await _run(tmp_path, "get", "workloads", "--node", "edge-a")) == [second, first]
        one = await _run(tmp_path, "get", "workloads", "--limit", "1")
        assert ids(one) == [third]
        hint = one.stderr.strip()
        assert hint.startswith("(1 of 3, newest first; --continue ") and hint.endswith(" shows the next)")
        token = hint.split("--continue ")[1].split()[0]
        # New work meanwhile does not shift the next page (a keyset token, not an offset).
        fourth = await api.post_workload({"name": "fourth", "command": ["true"], "resources": {"cpu": 512}})
        following = await _run(tmp_path, "get", "workloads", "--limit", "1", "--continue", token)
        assert ids(following) == [second] and "--continue " in following.stderr
        rest = await _run(tmp_path, "get", "workloads", "--continue", token)
        assert ids(rest) == [second, first] and rest.stderr == ""
        bad = await _run(tmp_path, "get", "workloads", "--continue", "nonsense")
        assert bad.returncode == 1 and "(field: continue)" in bad.stderr, bad.stderr
        assert len(bad.stderr.splitlines()) == 1
        assert ids(await _run(tmp_path, "get", "workloads", "--limit", "1", "--offset", "1")) == [third]
        names = await _run(tmp_path, "get", "workloads", "-o", "name")
        assert names.stdout.splitlines() == [f"workload/{w}" for w in (fourth, third, second, first)]
        wide = await _run(tmp_path, "get", "workloads", "-o", "wide", "--cluster", "default")
        assert wide.stdout.split("\n", 1)[0].split()[-3:] == ["PRIORITY", "CLUSTERS", "MESSAGE"], wide.stdout
        assert ids(wide) == [second, first]
        bogus = await _run(tmp_path, "get", "workloads", "--status", "Bogus")
        assert bogus.returncode == 1 and "(field: status)" in bogus.stderr, bogus.stderr
        misplaced = await _run(tmp_path, "get", "functions", "--node", "edge-a")
        assert misplaced.returncode == 1 and "--node does not apply to `get functions`" in misplaced.stderr
