"""Ship a trained PPO placement policy: ONNX fp32, int8, and what was measured of them.

:func:`export` reads the actor out of ``model.zip`` (torch, the ``[train]`` extra), writes
``placement.fp32.onnx`` (:mod:`.slot_model`), quantises it to ``placement.int8.onnx`` with
onnxruntime (dynamic: int8 per-channel weights; the graph's matrices are a few thousand values,
so calibrating activations buys nothing measurable), then checks both on held-out episodes:

* **exact**: the fp32 graph decides as the sb3 policy does, on every decision of the episodes
  the sb3 policy drives (the export is the trained network, not an approximation);
* **int8 agreement**: on the fp32 model's own episodes the int8 model is asked the same
  question each time: the share of identical decisions, and the share whose choice is the same
  or a near-tie under fp32 (:data:`~.chooser.NEAR_TIE`); the second must reach
  :data:`AGREEMENT_BAR`. Every disagreement measured so far was a near-tie between nodes the
  policy ranks within a few hundredths of a logit: int8 activations move those;
* **outcomes**: the int8 model then drives the same episodes by itself (return, SLA, energy).

``placement.json`` records the sources (training config, sha256 of each file) and these figures;
``controlplane serve --placement-model`` and ``controlplane simulate --placement-model`` load
the int8 file (or any of the two).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from controlplane.learn.chooser import NEAR_TIE, SlotObservationPolicy
from controlplane.learn.evaluate import Case, run_episode

__all__ = ["AGREEMENT_BAR", "EXACT_BAR", "FP32_NAME", "INT8_NAME", "METADATA_NAME", "export", "quantize"]

AGREEMENT_BAR = 0.99
EXACT_BAR = 0.999
"""The fp32 graph against the trained policy: the same network, so only a near-tie that float
rounding (onnxruntime's kernels vs torch's) breaks the other way may differ."""
FP32_NAME = "placement.fp32.onnx"
INT8_NAME = "placement.int8.onnx"
METADATA_NAME = "placement.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def quantize(fp32: Path, int8: Path) -> Path:
    """Dynamic int8 quantisation of every MatMul (per-channel weights, 7-bit range), metadata kept.

    ``reduce_range``: on x86 CPUs without VNNI (AVX2 only, common on edge boxes) onnxruntime's
    u8 x s8 kernel can saturate its 16-bit intermediate sums with full-range weights; on such a
    machine full-range weights agreed with fp32 on 82% of a random model's decisions, 7-bit ones
    on over 90% (tests/unit/learn/test_placement_model.py)."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process (shape inference) is for CNNs
    try:
        quantize_dynamic(
            str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True
        )
    finally:
        root.setLevel(level)
    src, dst = onnx.load(str(fp32)), onnx.load(str(int8))
    props = {p.key: p.value for p in src.metadata_props}
    props["precision"] = "int8"
    onnx.helper.set_model_props(dst, props)
    onnx.save(dst, str(int8))
    return int8


def export(
    model_dir: Path,
    out_dir: Path,
    cases: Sequence[Case],
    *,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Write the two models and ``placement.json`` into ``out_dir``; returns the metadata. Raises
    ``ValueError`` if the fp32 graph disagrees with the trained policy or int8 misses the bar;
    then ``out_dir`` is left as it was (a shipped model is never replaced by one that failed)
    and what was made stays in ``out_dir/.rejected`` to look at."""
    from controlplane.learn.evaluate import evaluate
    from controlplane.learn.gym_env import EdgeplaneSchedEnv
    from controlplane.learn.ppo import export_weights, load_policy
    from controlplane.learn.slot_model import save_model

    report = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    training = {
        "config": report.get("config"),
        "source": str(model_dir),
        "model_sha256": _sha256(model_dir / "model.zip"),
    }
    stage = out_dir / ".staging"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    fp32 = save_model(
        export_weights(model_dir),
        stage / FP32_NAME,
        {"precision": "fp32", "training": json.dumps(training, sort_keys=True)},
    )
    int8 = quantize(fp32, stage / INT8_NAME)
    log(f"made {FP32_NAME} ({fp32.stat().st_size} B) and {INT8_NAME} ({int8.stat().st_size} B)")

    trained, cfg = load_policy(model_dir)
    env = EdgeplaneSchedEnv(max_nodes=cfg.max_nodes)
    exported = SlotObservationPolicy(fp32)
    same = decisions = 0
    for case in cases:  # the sb3 policy drives; the fp32 graph is asked the same question

        def both(obs: Any, mask: Any, info: Any) -> int:
            nonlocal same, decisions
            action = trained(obs, mask, info)
            decisions += 1
            same += action == exported(obs, mask, info)
            return action

        run_episode(env, both, case)
    env.close()
    exact = same / max(decisions, 1)
    log(f"fp32 graph vs the trained policy: {same}/{decisions} decisions identical")

    shadowed = SlotObservationPolicy(fp32, shadow=int8)
    started = time.perf_counter()
    result = evaluate({"onnx-fp32": shadowed}, cases, max_nodes=cfg.max_nodes, log=log)
    wall = time.perf_counter() - started
    agreement = shadowed.agreement or 0.0
    near = shadowed.near_agreement or 0.0
    log(
        f"int8 vs fp32: {shadowed.agreed}/{shadowed.decisions} decisions identical ({100 * agreement:.2f}%), "
        f"{shadowed.near}/{shadowed.decisions} identical or a near-tie ({100 * near:.2f}%)"
    )
    alone = evaluate({"onnx-int8": SlotObservationPolicy(int8)}, cases, max_nodes=cfg.max_nodes, log=log)

    meta = {
        "kind": "edgeplane placement policy (PPO, slot network)",
        "files": {
            FP32_NAME: {"sha256": _sha256(fp32), "bytes": fp32.stat().st_size},
            INT8_NAME: {"sha256": _sha256(int8), "bytes": int8.stat().st_size},
        },
        "training": training,
        "checks": {
            "cases": len(cases),
            "fp32_vs_trained": {"decisions": decisions, "identical": same, "share": exact},
            "int8_vs_fp32": {
                "decisions": shadowed.decisions,
                "identical": shadowed.agreed,
                "share": agreement,
                "near_tie": NEAR_TIE,
                "identical_or_near_tie": shadowed.near,
                "near_share": near,
                "bar": AGREEMENT_BAR,
            },
            "fp32_eval": result["policies"]["onnx-fp32"],
            "int8_eval": alone["policies"]["onnx-int8"],
            "eval_wall_s": round(wall, 1),
        },
    }
    (stage / METADATA_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    failure = None
    if exact < EXACT_BAR:
        failure = (
            f"the fp32 graph decided differently from the trained policy on {decisions - same} "
            f"of {decisions} decisions"
        )
    elif near < AGREEMENT_BAR:
        failure = (
            f"int8 chooses as fp32 (or a near-tie) on {100 * near:.2f}% of decisions, "
            f"under {100 * AGREEMENT_BAR:.0f}%"
        )
    if failure is not None:
        rejected = out_dir / ".rejected"
        shutil.rmtree(rejected, ignore_errors=True)
        stage.rename(rejected)
        raise ValueError(f"{failure}; {out_dir} left as it was, the rejected files are in {rejected}")
    for name in (FP32_NAME, INT8_NAME, METADATA_NAME):
        os.replace(stage / name, out_dir / name)
    stage.rmdir()
    log(f"wrote {out_dir / FP32_NAME}, {out_dir / INT8_NAME} and {out_dir / METADATA_NAME}")
    return meta
