"""Versioned local policies over the real API (``/v1/policies``): an upload is kept only after it
loads as agents load it and agrees with the version in force on held-out decisions."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import client_cli, running_hub, secured_nats, write_admin_config

from edgeplane_contract.policy.actions import N_ACTIONS, N_BINS
from edgeplane_contract.policy.features import N_FEATURES
from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH

from controlplane.store.identities import IdentityStore

onnx = pytest.importorskip("onnx")

SHIPPED = DEFAULT_MODEL_PATH.read_bytes()
FP32 = (DEFAULT_MODEL_PATH.parent / "local_policy.fp32.onnx").read_bytes()
METADATA: dict[str, Any] = json.loads((DEFAULT_MODEL_PATH.parent / "metadata.json").read_text())
BARE_METADATA = {k: v for k, v in METADATA.items() if k != "files"}


def constant_model(preferred: int) -> bytes:
    """A well-formed model that ignores its input and always prefers action ``preferred`` (a
    deliberately bad policy: bin 0 is the smallest CPU and memory quota)."""
    from onnx import TensorProto, helper, numpy_helper

    logits_bias = np.full(N_ACTIONS, -1.0, dtype=np.float32)
    logits_bias[preferred] = 5.0
    inits = [
        numpy_helper.from_array(np.zeros((N_FEATURES, N_BINS), np.float32), "wq"),
        numpy_helper.from_array(np.zeros(N_BINS, np.float32), "bq"),
        numpy_helper.from_array(np.zeros((N_FEATURES, N_ACTIONS), np.float32), "wl"),
        numpy_helper.from_array(logits_bias, "bl"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q0"]),
        helper.make_node("Add", ["q0", "bq"], ["q"]),
        helper.make_node("MatMul", ["x", "wl"], ["l0"]),
        helper.make_node("Add", ["l0", "bl"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", N_FEATURES])],
        [
            helper.make_tensor_value_info("q", TensorProto.FLOAT, ["N", N_BINS]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", N_ACTIONS]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def body(model: bytes, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": base64.b64encode(model).decode(), "metadata": metadata, **extra}


async def test_a_model_is_kept_as_a_version_after_it_loads_and_agrees_with_the_one_in_force(
    nats_server, sqlite_url
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, first = await api.call("POST", "/v1/policies", body(SHIPPED, METADATA, description="shipped"))
        assert status == 201, first
        assert first["version"] == 1 and first["state"] == "available"
        assert first["evaluation"]["reference"] == "shipped" and first["evaluation"]["agreement"] == 1.0
        assert first["evaluation"]["cases"] == 512 and first["feature_schema_version"] == 2

        status, again = await api.call("POST", "/v1/policies", body(SHIPPED, METADATA))
        assert (status, again["version"]) == (200, 1), "the same model is the same version"

        # The fp32 export of the same network: another file, the same decisions.
        status, fp32 = await api.call("POST", "/v1/policies", body(FP32, METADATA))
        assert status == 201 and fp32["version"] == 2, fp32
        assert fp32["evaluation"]["agreement"] > 0.95

        # A policy that always takes the smallest bin disagrees with the shipped one on most
        # decisions: refused, and the reason names the share; asked for no agreement, it is kept
        # and its recorded reward is below the reference's (what a canary must then show).
        bad = constant_model(0)
        status, refused = await api.call("POST", "/v1/policies", body(bad, BARE_METADATA))
        assert status == 422 and refused["error"]["field"] == "model", refused
        assert "held-out decisions" in refused["error"]["message"]
        status, kept = await api.call("POST", "/v1/policies", body(bad, BARE_METADATA, min_agreement=0))
        assert status == 201, kept
        assert kept["evaluation"]["agreement"] < 0.5
        assert kept["evaluation"]["mean_reward"] < kept["evaluation"]["reference_mean_reward"]

        listed = await api.get("/v1/policies")
        assert listed["total"] == 3 and [p["version"] for p in listed["items"]] == [1, 2, 3]
        assert (await api.get("/v1/policies/v2"))["sha256"] == fp32["sha256"]
        assert (await api.get("/v1/policies/2")) == await api.get("/v1/policies/v2")
        status, missing = await api.call("GET", "/v1/policies/99")
        assert status == 404 and missing["error"]["field"] == "version"
        status, wrong = await api.call("GET", "/v1/policies/latest")
        assert status == 422 and wrong["error"]["field"] == "version"
        events = await api.get("/v1/events?kind=PolicyRegistered")
        assert [e["object_id"] for e in events["items"]] == ["1", "2", "3"]

        # This hub runs on anonymous NATS: it has no key to sign versions with, so it sends none.
        for action, payload in (("promote", None), ("rollout", {"percent": 50}), ("canary", {})):
            status, refused = await api.call("POST", f"/v1/policies/1/{action}", payload)
            assert status == 409 and "no NATS key to sign" in refused["error"]["message"], (action, refused)


@pytest.mark.parametrize(
    ("upload", "field", "reason"),
    [
        (body(b"not an onnx file", BARE_METADATA), "model", "onnxruntime cannot load it"),
        (body(SHIPPED, {**METADATA, "feature_schema_version": 1}), "metadata", "feature_schema_version"),
        (body(SHIPPED, {**METADATA, "actions": None}), "metadata", "actions"),
        (
            body(SHIPPED, {**METADATA, "files": {"m.onnx": {"sha256": "0" * 64}}}),
            "metadata.files",
            "another model's",
        ),
        ({"model": "!!!", "metadata": METADATA}, "model", "base64"),
        ({"model": base64.b64encode(SHIPPED).decode()}, "metadata", "required"),
        (body(SHIPPED, METADATA, min_agreement=2), "min_agreement", "from 0 to 1"),
    ],
)
async def test_a_model_that_cannot_run_here_is_refused_naming_why(
    nats_server, sqlite_url, upload, field, reason
):
    async with running_hub(nats_server.url, sqlite_url) as (_, api):
        status, reply = await api.call("POST", "/v1/policies", upload)
        assert status == 422, reply
        assert reply["error"]["field"] == field and reason in reply["error"]["message"], reply
        assert (await api.get("/v1/policies"))["total"] == 0


async def test_uploading_a_policy_needs_the_admin_scope(nats_server, sqlite_url):
    async with running_hub(nats_server.url, sqlite_url) as (running, api):
        identities = IdentityStore(running.hub.store)
        for scopes in (["read"], ["workloads", "functions", "nodes"]):
            token = await identities.create_api_token("bot", scopes)
            status, reply = await api.call(
                "POST",
                "/v1/policies",
                body(SHIPPED, METADATA),
                headers={"Authorization": f"Bearer {token.token}"},
            )
            assert status == 403, reply
        assert (await api.get("/v1/policies"))["total"] == 0


async def test_policy_push_and_list_from_the_command_line(sqlite_url, tmp_path):
    """``controlplane policy push|list`` as a user runs them: separate processes, the config file
    ``controlplane up`` writes, the model's metadata.json found next to it."""
    (tmp_path / "nats").mkdir()
    with secured_nats(tmp_path / "nats") as secured:
        await _cli_session(secured, sqlite_url, tmp_path)


async def _cli_session(secured: Any, sqlite_url: str, tmp_path: Path) -> None:
    async with running_hub(secured.url, sqlite_url, **secured.hub_overrides()) as (running, _):
        await write_admin_config(running, tmp_path)
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "m.onnx").write_bytes(constant_model(64))  # always declines
        (tmp_path / "bad" / "metadata.json").write_text(json.dumps(BARE_METADATA))

        pushed = await asyncio.to_thread(client_cli, tmp_path, "policy", "push", str(DEFAULT_MODEL_PATH))
        assert pushed.returncode == 0, pushed.stderr
        assert pushed.stdout.startswith("policy v1 registered: agrees with shipped on 100.0% of 512")
        again = await asyncio.to_thread(client_cli, tmp_path, "policy", "push", str(DEFAULT_MODEL_PATH))
        assert "v1 is already registered" in again.stdout, again.stdout
        refused = await asyncio.to_thread(client_cli, tmp_path, "policy", "push", "bad/m.onnx")
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert "held-out decisions" in refused.stderr and "model" in refused.stderr
        missing = await asyncio.to_thread(client_cli, tmp_path, "policy", "push", "nowhere.onnx")
        assert missing.returncode == 1 and "cannot read the model nowhere.onnx" in missing.stderr
        kept = await asyncio.to_thread(
            client_cli,
            tmp_path,
            "policy",
            "push",
            "bad/m.onnx",
            "--min-agreement",
            "0",
            "--description",
            "declines",
        )
        assert kept.returncode == 0 and kept.stdout.startswith("policy v2 registered"), kept.stderr

        listed = await asyncio.to_thread(client_cli, tmp_path, "policy", "list")
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split()[:3] == ["VERSION", "STATE", "SHA256"]
        assert [r.split()[:2] for r in rows] == [["v1", "available"], ["v2", "available"]]
        assert rows[1].split()[-1] == "declines"
        as_json = await asyncio.to_thread(client_cli, tmp_path, "policy", "list", "-o", "json")
        assert [p["version"] for p in json.loads(as_json.stdout)] == [1, 2]

        # No node is known to this hub: a rollout names what is wrong, promote and rollback work.
        unknown = await asyncio.to_thread(client_cli, tmp_path, "policy", "rollout", "v1", "--nodes", "n9")
        assert unknown.returncode == 1 and "node 'n9' is not known" in unknown.stderr, unknown.stderr
        nobody = await asyncio.to_thread(client_cli, tmp_path, "policy", "rollout", "1", "--percent", "50")
        assert nobody.returncode == 0 and "rolled out to no node (0 changed)" in nobody.stdout, nobody.stderr
        promoted = await asyncio.to_thread(client_cli, tmp_path, "policy", "promote", "v1")
        assert promoted.returncode == 0 and "v1 promoted" in promoted.stdout, promoted.stderr
        back = await asyncio.to_thread(
            client_cli, tmp_path, "policy", "rollback", "v2", "--reason", "declines"
        )
        assert back.returncode == 0 and "v2 rolled back" in back.stdout, back.stderr
        states = await asyncio.to_thread(client_cli, tmp_path, "policy", "list")
        assert [r.split()[:2] for r in states.stdout.splitlines()[1:]] == [
            ["v1", "promoted"],
            ["v2", "rolled_back"],
        ]
        bad = await asyncio.to_thread(client_cli, tmp_path, "policy", "promote", "latest")
        assert bad.returncode == 1 and "'latest' is not a policy version" in bad.stderr
        busy = await asyncio.to_thread(client_cli, tmp_path, "policy", "canary", "v1")
        assert busy.returncode == 1 and "v1 is promoted: only an available version" in busy.stderr, (
            busy.stderr
        )
        none = await asyncio.to_thread(client_cli, tmp_path, "policy", "canary", "v1", "--status")
        assert none.returncode == 1 and "has had no canary" in none.stderr, none.stderr
        steps = await asyncio.to_thread(client_cli, tmp_path, "policy", "canary", "v1", "--steps", "50,10")
        assert steps.returncode == 1 and "steps" in steps.stderr, steps.stderr
