"""Quantise the fp32 policy to int8 with onnxruntime, measure the candidates, keep the best.

Candidates:

* ``static-qdq``: static QDQ, int8 per-channel weights, uint8 activations calibrated (MinMax)
  on environment states drawn from calibration seeds;
* ``static-qdq-fp32-input``: the same, but the first MatMul stays fp32. The input vector mixes
  features of very different ranges under one activation scale; keeping that one layer in float
  costs ~7k fp32 weights and avoids the coarsest rounding;
* ``dynamic``: int8 per-channel weights, activations quantised per call
  (onnxruntime fuses each layer into one ``DynamicQuantizeMatMul``);
* ``dynamic-per-tensor``: the same with one weight scale per matrix.

Each is measured against the fp32 model on held-out states: the share of identical decisions
(after masking and the decision rule), the mean reward of its decisions, its size and a bare
single-row inference latency (all models timed interleaved, call by call, so a busy machine
slows them alike). Among candidates that agree with fp32 on at least :data:`AGREEMENT_BAR` of
decisions, the one whose decisions earn the most reward wins (see :func:`choose`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from edgeplane_contract.objective import AdaptiveWeights
from edgeplane_contract.policy.actions import ACTION_SPEC, N_BINS, select_actions, select_from_logits
from edgeplane_contract.policy.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    N_FEATURES,
    interference_prior,
)

from controlplane.policy.export import INPUT_NAME, LOGITS_NAME, Q_NAME
from controlplane.policy.samples import Samples
from controlplane.policy.train import N_OUTPUTS, mean_reward, split_heads

__all__ = [
    "AGREEMENT_BAR",
    "bare_latency_us",
    "choose",
    "measure",
    "quantize_candidates",
    "run_batch",
    "session",
    "write_metadata",
]


AGREEMENT_BAR = 0.99


def session(path: str | Path) -> Any:
    """An onnxruntime session on one thread (as the agent runs it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def run_batch(sess: Any, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Outputs ``q | logits`` (N, 129) for a feature matrix, one row per call, as the agent runs it.

    Row by row matters: a dynamically quantised model picks its activation scale per call, so
    a batched call gives (slightly) different outputs than the agent's single-row calls.
    """
    out = np.empty((len(x), N_OUTPUTS), dtype=np.float32)
    for i in range(len(x)):
        q, logits = sess.run([Q_NAME, LOGITS_NAME], {INPUT_NAME: x[i : i + 1]})
        out[i, :N_BINS] = q[0]
        out[i, N_BINS:] = logits[0]
    return out


def _actions(out: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    return select_from_logits(split_heads(out)[1], mask)


def bare_latency_us(
    sessions: dict[str, Any], x: npt.NDArray[np.float32], n: int = 3000
) -> dict[str, tuple[float, float]]:
    """(p50, p99) microseconds of a single-row ``session.run`` per session, timed interleaved."""
    names = {key: [Q_NAME, LOGITS_NAME] for key in sessions}
    rows = [x[i % len(x)][None, :] for i in range(n)]
    times = {key: np.empty(n) for key in sessions}
    for i, row in enumerate(rows):
        for key, sess in sessions.items():
            t0 = time.perf_counter()
            sess.run(names[key], {INPUT_NAME: row})
            times[key][i] = time.perf_counter() - t0
    # The first calls warm caches; drop them.
    skip = min(200, n // 4)
    return {
        key: (float(np.percentile(t[skip:], 50) * 1e6), float(np.percentile(t[skip:], 99) * 1e6))
        for key, t in times.items()
    }


class _Calibration:
    """onnxruntime CalibrationDataReader over a feature matrix."""

    def __init__(self, x: npt.NDArray[np.float32], batch: int = 256) -> None:
        self._x = x
        self._batch = batch
        self.rewind()

    def get_next(self) -> dict[str, npt.NDArray[np.float32]] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it: Iterator[dict[str, npt.NDArray[np.float32]]] = (
            {INPUT_NAME: self._x[i : i + self._batch]} for i in range(0, len(self._x), self._batch)
        )


def _copy_props(src: Path, dst: Path, extra: dict[str, str]) -> None:
    import onnx

    source = onnx.load(str(src))
    model = onnx.load(str(dst))
    props = {p.key: p.value for p in source.metadata_props}
    props.update(extra)
    del model.metadata_props[:]
    onnx.helper.set_model_props(model, props)
    onnx.save_model(model, str(dst))


def quantize_candidates(
    fp32: Path, out_dir: Path, calibration: npt.NDArray[np.float32], first_matmul: str
) -> dict[str, Path]:
    """Write every candidate int8 model into ``out_dir``; returns name -> path."""
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, exclude in (("static-qdq", []), ("static-qdq-fp32-input", [first_matmul])):
        path = out_dir / f"{name}.onnx"
        quantize_static(
            str(fp32),
            str(path),
            _Calibration(calibration),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=exclude,
            calibrate_method=CalibrationMethod.MinMax,
        )
        _copy_props(fp32, path, {"quantization": name})
        paths[name] = path
    for name, per_channel in (("dynamic", True), ("dynamic-per-tensor", False)):
        path = out_dir / f"{name}.onnx"
        quantize_dynamic(
            str(fp32),
            str(path),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            op_types_to_quantize=["MatMul"],
        )
        _copy_props(fp32, path, {"quantization": name})
        paths[name] = path
    return paths


def measure(
    fp32: Path, candidates: dict[str, Path], held_out: Samples, *, latency_calls: int = 3000
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """fp32 figures and one row of figures per candidate, on the held-out samples."""
    rewards = held_out.rewards()
    teacher = select_actions(rewards[:, :N_BINS], held_out.mask)
    sessions = {"fp32": session(fp32)} | {name: session(path) for name, path in candidates.items()}
    latency = bare_latency_us(sessions, held_out.x, latency_calls)
    ref_actions = _actions(run_batch(sessions["fp32"], held_out.x), held_out.mask)
    ref = {
        "name": "fp32",
        "bytes": fp32.stat().st_size,
        "mean_reward": mean_reward(rewards, ref_actions),
        "agreement_with_teacher": float((ref_actions == teacher).mean()),
        "bare_p50_us": latency["fp32"][0],
        "bare_p99_us": latency["fp32"][1],
    }
    rows = []
    for name, path in candidates.items():
        actions = _actions(run_batch(sessions[name], held_out.x), held_out.mask)
        rows.append(
            {
                "name": name,
                "bytes": path.stat().st_size,
                "agreement_with_fp32": float((actions == ref_actions).mean()),
                "agreement_with_teacher": float((actions == teacher).mean()),
                "mean_reward": mean_reward(rewards, actions),
                "bare_p50_us": latency[name][0],
                "bare_p99_us": latency[name][1],
            }
        )
    return ref, rows


def choose(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Among candidates agreeing with fp32 on >= AGREEMENT_BAR, the best held-out mean reward
    (within 1e-4, the higher agreement); if none reaches the bar, the best agreement.

    Latency is reported but does not decide: on a shared machine it is too noisy to rank
    models whose cost is dominated by the same per-call overhead.
    """
    good = [r for r in rows if r["agreement_with_fp32"] >= AGREEMENT_BAR]
    if not good:
        return max(rows, key=lambda r: r["agreement_with_fp32"])
    top = max(r["mean_reward"] for r in good)
    close = [r for r in good if r["mean_reward"] >= top - 1e-4]
    return max(close, key=lambda r: r["agreement_with_fp32"])


def _file_entry(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def write_metadata(model_dir: Path, body: dict[str, Any]) -> Path:
    """``metadata.json`` next to the models: schema, action space, weight rule, files, ``body``.

    The runtime refuses a model whose schema version, feature count, interference prior or
    action space differ from its own, or whose file does not match the checksum recorded here.
    """
    files = {p.name: _file_entry(p) for p in sorted(model_dir.glob("local_policy.*.onnx"))}
    meta: dict[str, Any] = {
        "format": "edgeplane-local-policy",
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "n_features": N_FEATURES,
        "feature_names": list(FEATURE_NAMES),
        "interference_prior": interference_prior(),
        "actions": dict(ACTION_SPEC),
        "weight_rule": {
            "inputs": "effective w1..w4; the agent adapts w3 before every decision",
            "w3_on_battery": "w3 * battery_multiplier * (1 + low_battery_gain * (1 - battery_percent / 100))",
            "battery_multiplier": AdaptiveWeights().battery_multiplier,
            "low_battery_gain": AdaptiveWeights().low_battery_gain,
            "implementation": "edgeplane_contract.objective.energy_weight via "
            "edgeplane_contract.policy.weights",
        },
        "outputs": {
            "q": "[N, 64] predicted reward R of each bin under the input weights (the decision's score)",
            "logits": "[N, 65] policy over the 64 bins and decline; the runtime masks infeasible "
            "bins and takes the largest remaining logit",
        },
        "files": files,
        **body,
    }
    path = model_dir / "metadata.json"
    path.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path
