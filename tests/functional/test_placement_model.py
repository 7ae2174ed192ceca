"""The hub with the shipped PPO placement policy (``--placement-model``): real NATS, agents and
HTTP; the model picks every replica's node, and a bad model stops the hub at start in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness import running_agents, running_hub, wait_for

import controlplane.learn

SHIPPED = Path(controlplane.learn.__file__).resolve().parent / "model" / "placement.int8.onnx"


async def test_the_hub_places_with_the_shipped_model_and_every_workload_succeeds(
    nats_server, sqlite_url, tmp_path
):
    async with (
        running_hub(nats_server.url, sqlite_url, placement_model=SHIPPED) as (running, api),
        running_agents(nats_server.url, tmp_path, ["m1", "m2", "m3"]),
    ):
        await wait_for(api.nodes, lambda items: sum(n["status"] == "Ready" for n in items) == 3)
        ids = [
            await api.post_workload(
                {"name": f"w{i}", "command": ["true"], "resources": {"cpu": 0.5, "memory": "64Mi"}}
            )
            for i in range(6)
        ]
        done = [await api.wait_status(w, "Succeeded", "Failed") for w in ids]
        assert [d["status"] for d in done] == ["Succeeded"] * 6
        assert {d["node"] for d in done} <= {"m1", "m2", "m3"}
        decided = running.hub.metrics.placement_model_decisions._value.get()
        assert decided >= 6  # every replica's node was the model's pick (never deferred)
        async with api.session.get(f"{running.url}/metrics") as resp:
            text = await resp.text()
        assert "edgeplane_placement_model_decisions_total" in text


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "no such file"), (b"not onnx", "not a readable ONNX model")],
    ids=["missing", "junk"],
)
def test_serve_refuses_a_bad_placement_model_at_start_in_one_line(tmp_path, content, reason):
    model = tmp_path / "model.onnx"
    if content is not None:
        model.write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--data-dir", str(tmp_path / "data"),
         "--placement-model", str(model), "--log-level", "ERROR"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "--placement-model" in lines[0] and reason in lines[0], lines
