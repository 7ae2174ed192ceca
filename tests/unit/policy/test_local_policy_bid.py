"""LocalPolicyBid: the agents' bid round emulated in the scheduler with the shipped int8 model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeplane_contract.policy.actions import (
    CPU_MULTIPLIERS,
    DECLINE,
    MEMORY_MULTIPLIERS,
    N_ACTIONS,
    N_BINS,
    bin_index,
)
from edgeplane_contract.policy.runtime import DEFAULT_MODEL_PATH
from edgeplane_contract.resources import ResourceRequest

from controlplane.errors import ConfigError
from controlplane.scheduling.model import Assignment, GpuDevice, NodeState, WorkloadRequest
from controlplane.scheduling.plugins.local_policy_bid import Bids, LocalPolicyBid
from controlplane.scheduling.profiles import BUILTIN_PROFILES, load_profile, parse_profile
from controlplane.scheduling.scheduler import Scheduler

GB = 2**30


def _plugin(sched: Scheduler) -> LocalPolicyBid:
    found = [p for p, _, _ in sched._scorers if isinstance(p, LocalPolicyBid)]
    assert len(found) == 1
    return found[0]


def _record_bids(plugin: LocalPolicyBid, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Wrap ``plugin.bids`` to keep every cycle's candidates, inputs and bids."""
    seen: list[dict[str, Any]] = []
    original = plugin.bids

    def bids(request: WorkloadRequest, cand: Any, x: Any) -> Bids:
        views = plugin.node_views(cand, x)  # as the nodes are now, before the placement
        result = original(request, cand, x)
        seen.append({"request": request, "cand": cand, "x": x, "views": views, "bids": result})
        return result

    monkeypatch.setattr(plugin, "bids", bids)
    return seen


def _node(name: str, *, source: str = "mains", pct: float | None = None, **kw: Any) -> NodeState:
    defaults: dict[str, Any] = {"cpu": 8, "memory": 16 * GB, "node_type": "edge"}
    defaults.update(kw)
    return NodeState(name=name, power_source=source, battery_percent=pct, **defaults)


def _loaded_pair(pct: float, load: float) -> Scheduler:
    """Two identical edge boxes carrying the same load: one on mains, one on battery at ``pct``."""
    sched = Scheduler("edgeplane-learned", seed=0)
    for name, source, level in (("mains", "mains", None), ("battery", "battery", pct)):
        sched.upsert_node(_node(name, source=source, pct=level))
        status = sched.reserve_existing(
            f"load-{name}", 0, name, Assignment(cpu=load, memory=4 * GB), kind="service"
        )
        assert status.ok
    return sched


def _service(cpu: float = 1.0, runtime: float = 20.0, sla: float | None = 60.0) -> WorkloadRequest:
    return WorkloadRequest(
        id=f"svc-{cpu}-{runtime}",
        resources=ResourceRequest(cpu=cpu, memory=GB),
        kind="service",
        expected_runtime_s=runtime,
        sla_latency_s=sla,
    )


def test_the_learned_profile_is_edgeplane_with_the_policy_in_place_of_the_reward_score() -> None:
    edgeplane, learned = load_profile("edgeplane"), load_profile("edgeplane-learned")
    names = [p.name for p in learned.plugins]
    assert names == ["LocalPolicyBid" if p.name == "MultiObjective" else p.name for p in edgeplane.plugins]
    weights = {p.name: p.weight for p in learned.plugins}
    assert weights["LocalPolicyBid"] == 4.0
    assert learned.action_space == edgeplane.action_space
    sched = Scheduler("edgeplane-learned")
    plugin = _plugin(sched)
    assert plugin.policy.uses_model and plugin.policy.source == "onnx-int8"
    assert plugin.policy.path == DEFAULT_MODEL_PATH
    # The reward configuration (and so battery awareness and explanations) stays edgeplane's.
    assert sched.battery_aware
    assert plugin.config == Scheduler("edgeplane")._reward_config


def test_batched_bids_equal_the_agents_own_decisions_node_by_node(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = Scheduler("edgeplane-learned", seed=0)
    sched.upsert_node(_node("cpu-a", cpu=64, memory=256 * GB, node_type="cpu"))
    sched.upsert_node(
        _node(
            "gpu-a",
            cpu=64,
            memory=512 * GB,
            node_type="gpu",
            gpus=[GpuDevice(0, mig_enabled=True), GpuDevice(1)],
        )
    )
    sched.upsert_node(_node("edge-a"))
    sched.upsert_node(_node("edge-b", source="battery", pct=35.0))
    assert sched.reserve_existing("busy", 0, "edge-a", Assignment(cpu=3, memory=4 * GB)).ok
    plugin = _plugin(sched)
    seen = _record_bids(plugin, monkeypatch)
    requests = [
        _service(),
        WorkloadRequest(id="batch", resources=ResourceRequest(cpu=4, memory=8 * GB), kind="batch"),
        WorkloadRequest(
            id="mig",
            resources=ResourceRequest(cpu=2, memory=4 * GB, mig=["2g.10gb"]),
            kind="service",
            expected_runtime_s=120.0,
            sla_latency_s=400.0,
        ),
    ]
    for request in requests:
        decision = sched.schedule(request, enqueue=False)
        assert decision.scheduled
        chosen = decision.explanation.replicas[0].chosen
        assert "LocalPolicyBid" in chosen.plugins and chosen.reward is not None
    assert len(seen) == len(requests)
    checked = 0
    for entry in seen:
        views = entry["views"]
        bids: Bids = entry["bids"]
        offer = plugin._offer(entry["request"])
        w = plugin.config.weights
        for k, view in enumerate(views):
            offer.transfer_s = float(entry["x"].transfer_s[k])
            weights = (w.util, w.qos, float(bids.weights_energy[k]), w.penalty)
            alone = plugin.policy.decide(view, offer, weights)
            assert alone.action == int(bids.action[k])
            assert alone.decline == (not bids.accept[k])
            # The default bid_score is what a live bid is ranked by: score_requested, else score.
            ranked = alone.requested_score if alone.requested_score is not None else alone.score
            expected = alone.score if alone.decline else ranked  # a decline scores DECLINE_REWARD
            assert expected == pytest.approx(float(bids.score[k]), abs=1e-6)
            checked += 1
    assert checked >= 7
    # The MIG request only had the GPU node as a candidate, described with its MIG room.
    mig_views = seen[2]["views"]
    assert [v.node_type for v in mig_views] == ["gpu"] and mig_views[0].mig_free[1] == 3


@pytest.mark.parametrize("load", [2.0, 4.0])
def test_a_node_on_a_low_battery_bids_below_the_same_node_on_mains(
    load: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    sched = _loaded_pair(20.0, load)
    plugin = _plugin(sched)
    seen = _record_bids(plugin, monkeypatch)
    offers = [_service(1.0, 20.0, 60.0), _service(2.0, 60.0, 180.0), _service(0.5, 5.0, 20.0)]
    for request in offers:
        decision = sched.schedule(request, enqueue=False)
        assert decision.placements[0].node == "mains"
        sched.release(request.id)
    for entry in seen:
        names = [sched.nodes.names[int(r)] for r in entry["cand"].rows]
        bids = entry["bids"]
        mains, battery = names.index("mains"), names.index("battery")
        assert bids.accept[mains]
        assert bids.weights_energy[battery] > bids.weights_energy[mains]
        # Lower, or not offered at all (a decline is worse than any accepting bid).
        assert not bids.accept[battery] or bids.score[battery] < bids.score[mains]


def test_a_declining_node_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    # Controlled model outputs: the node every other score prefers (the emptier one, on which
    # topology spread and the fallback reward agree) declines with the largest q of all.
    sched = Scheduler("edgeplane-learned", seed=0)
    for name in ("a", "b", "c"):
        sched.upsert_node(_node(name))
    assert sched.reserve_existing("x", 0, "b", Assignment(cpu=2, memory=2 * GB)).ok
    assert sched.reserve_existing("x", 1, "c", Assignment(cpu=2, memory=2 * GB)).ok
    plugin = _plugin(sched)

    def outputs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        q = np.full((n, N_BINS), 0.1, dtype=np.float32)
        logits = np.zeros((n, N_ACTIONS), dtype=np.float32)
        empty = x[:, 23] > 0.5  # node.empty
        q[empty] = 1.0
        logits[empty, DECLINE] = 10.0
        logits[~empty, 0] = 10.0
        return q, logits

    monkeypatch.setattr(plugin.policy, "outputs", outputs)
    for k in range(20):
        request = WorkloadRequest(id=f"w{k}", resources=ResourceRequest(cpu=0.5, memory=GB // 4))
        decision = sched.schedule(request, enqueue=False)
        node = decision.placements[0].node
        assert node in ("b", "c"), decision.explanation
        alternatives = decision.explanation.replicas[0].alternatives
        assert "a" not in [e.node for e in alternatives]
        sched.release(request.id)
    assert plugin.stats["declines"] == 20 and plugin.stats["fallbacks"] == 0


def test_when_every_node_declines_the_reward_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = Scheduler("edgeplane-learned", seed=0)
    sched.upsert_node(_node("a"))
    sched.upsert_node(_node("b", source="battery", pct=10.0))
    plugin = _plugin(sched)

    def outputs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.zeros((x.shape[0], N_ACTIONS), dtype=np.float32)
        logits[:, DECLINE] = 1.0
        return np.full((x.shape[0], N_BINS), 5.0, dtype=np.float32), logits

    monkeypatch.setattr(plugin.policy, "outputs", outputs)
    decision = sched.schedule(_service(), enqueue=False)
    assert decision.scheduled and decision.placements[0].node == "a"
    replica = decision.explanation.replicas[0]
    for entry in [replica.chosen, *replica.alternatives]:
        assert entry.plugins["LocalPolicyBid"].raw == pytest.approx(entry.reward.total)
    assert len(replica.alternatives) == 1  # nothing excluded
    assert plugin.stats["fallbacks"] == 1


def test_the_shipped_model_never_has_a_declining_node_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    sched = Scheduler("edgeplane-learned", seed=3)
    for k in range(12):
        source = "battery" if k % 3 == 0 else "mains"
        sched.upsert_node(_node(f"e{k}", source=source, pct=float(rng.uniform(5, 100))))
    plugin = _plugin(sched)
    seen = _record_bids(plugin, monkeypatch)
    kinds = ["service", "function", "batch", "analytics"]
    placed = 0
    for k in range(60):
        kind = kinds[k % 4]
        request = WorkloadRequest(
            id=f"w{k}",
            resources=ResourceRequest(
                cpu=float(rng.choice([0.5, 1, 2])), memory=int(rng.choice([1, 2])) * GB
            ),
            kind=kind,
            expected_runtime_s=float(rng.uniform(5, 900)),
            sla_latency_s=float(rng.uniform(30, 2000)) if kind != "batch" else None,
        )
        decision = sched.schedule(request, enqueue=False)
        if not decision.scheduled:
            continue
        placed += 1
        bids = seen[-1]["bids"]
        names = [sched.nodes.names[int(r)] for r in seen[-1]["cand"].rows]
        node = decision.placements[0].node
        assert node is not None
        chosen = names.index(node)
        assert bids.fallback or bids.accept[chosen]
    assert placed >= 40
    # The real model does decline, and the fallback is taken: both paths ran.
    assert plugin.stats["declines"] > 0 and 0 < plugin.stats["fallbacks"] < plugin.stats["decisions"]


def test_a_missing_or_incompatible_model_is_a_config_error_at_profile_load(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(BUILTIN_PROFILES["edgeplane-learned"]))
    index = [p["name"] for p in doc["plugins"]].index("LocalPolicyBid")
    doc["plugins"][index]["args"]["model"] = str(tmp_path / "nope.onnx")
    with pytest.raises(ConfigError) as info:
        parse_profile(doc, source="learned.yaml")
    assert info.value.key == f"plugins[{index}].args"
    assert "not found" in info.value.reason and "nope.onnx" in info.value.reason

    for name in ("local_policy.int8.onnx", "metadata.json"):
        shutil.copyfile(DEFAULT_MODEL_PATH.parent / name, tmp_path / name)
    meta = json.loads((tmp_path / "metadata.json").read_text())
    meta["feature_schema_version"] = 999
    (tmp_path / "metadata.json").write_text(json.dumps(meta))
    doc["plugins"][index]["args"]["model"] = str(tmp_path / "local_policy.int8.onnx")
    with pytest.raises(ConfigError, match="incompatible feature_schema_version"):
        Scheduler(doc)


def test_a_short_simulation_with_the_learned_profile_places_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    from controlplane.sim.runner import SCHEDULERS, run_comparison

    assert "edgeplane-learned" in SCHEDULERS
    report = run_comparison(
        preset="edge-battery", schedulers=["edgeplane-learned"], hours=0.25, seed=5, nodes=12
    )
    result = report["schedulers"]["edgeplane-learned"]
    assert result["tasks"] > 100 and result["decisions"] > result["tasks"]
    assert result["unfinished_tasks"] == 0 and result["dropped_rate"] == 0.0
    assert 0.0 < result["mean_utilization"] < 1.0 and result["sla_violation_rate"] < 0.05


def test_the_scheduler_does_not_import_onnxruntime_or_torch_until_the_learned_profile_loads() -> None:
    code = (
        "import sys\n"
        "from controlplane.scheduling.scheduler import Scheduler\n"
        "Scheduler('edgeplane')\n"
        "assert 'onnxruntime' not in sys.modules and 'torch' not in sys.modules\n"
        "Scheduler('edgeplane-learned')\n"
        "assert 'onnxruntime' in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bid_score_requested_values_nodes_by_the_bin_they_are_placed_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = json.loads(json.dumps(BUILTIN_PROFILES["edgeplane-learned"]))
    index = [p["name"] for p in doc["plugins"]].index("LocalPolicyBid")
    doc["plugins"][index]["args"]["bid_score"] = "requested"
    sched = Scheduler(doc, seed=0)
    for k in range(3):
        sched.upsert_node(_node(f"e{k}"))
        assert sched.reserve_existing(f"x{k}", 0, f"e{k}", Assignment(cpu=1 + k, memory=2 * GB)).ok
    plugin = _plugin(sched)
    seen = _record_bids(plugin, monkeypatch)
    outputs = plugin.policy.outputs
    q_seen: list[np.ndarray] = []

    def keep(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, logits = outputs(x)
        q_seen.append(q)
        return q, logits

    monkeypatch.setattr(plugin.policy, "outputs", keep)
    sched.schedule(_service(), enqueue=False)
    bids = seen[0]["bids"]
    requested = bin_index(CPU_MULTIPLIERS.index(1.0), MEMORY_MULTIPLIERS.index(1.0), 0)
    assert bids.accept.any()
    np.testing.assert_allclose(bids.score[bids.accept], q_seen[0][bids.accept, requested], rtol=1e-6)

    doc["plugins"][index]["args"]["bid_score"] = "best"
    with pytest.raises(ConfigError, match="bid_score"):
        parse_profile(doc)


@pytest.mark.parametrize("profile", ["edgeplane-learned", "edgeplane-learned-unshielded"])
def test_the_sla_shield_keeps_the_bids_off_a_node_the_hub_expects_to_miss_the_sla(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents' model values the busy node most (controlled outputs); the hub's estimate says a
    tight-SLA service there would be slowed past its SLA. Shielded, the quiet node gets it."""
    sched = Scheduler(profile, seed=0)
    sched.upsert_node(_node("busy"))
    sched.upsert_node(_node("quiet"))
    for k in range(5):
        status = sched.reserve_existing(
            f"load-{k}", 0, "busy", Assignment(cpu=1.2, memory=GB), kind="service"
        )
        assert status.ok
    plugin = _plugin(sched)

    def outputs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        q = np.full((n, N_BINS), 0.1, dtype=np.float32)
        q[x[:, 23] < 0.5] = 0.9  # node.empty: the busy node is not
        logits = np.zeros((n, N_ACTIONS), dtype=np.float32)
        logits[:, 0] = 10.0
        return q, logits

    monkeypatch.setattr(plugin.policy, "outputs", outputs)
    decision = sched.schedule(_service(cpu=1.0, runtime=20.0, sla=26.0), enqueue=False)
    replica = decision.explanation.replicas[0]
    qos = {e.node: e.reward.qos for e in [replica.chosen, *replica.alternatives] if e.reward is not None}
    if profile == "edgeplane-learned":
        assert decision.placements[0].node == "quiet"
        assert plugin.stats["shielded"] == 1
        assert list(qos) == ["quiet"]  # the shielded node is out, like a declining one
    else:
        assert decision.placements[0].node == "busy"
        assert plugin.stats["shielded"] == 0
        assert qos["busy"] < qos["quiet"] == 0.0, qos
