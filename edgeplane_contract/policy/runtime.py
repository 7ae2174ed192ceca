"""``LocalPolicy``: the agent's per-offer decision from the shipped int8 ONNX model.

The model has two outputs: ``logits`` (65: the policy over the 64 bins and decline) and ``q``
(64: its estimate of the reward ``R = w1*R_util + w2*R_qos + w3*R_energy - w4*R_penalty`` of
each bin under the given weights). The runtime masks infeasible bins in exact float arithmetic,
outside the model, so quantisation can never make an infeasible action win; it takes the
allowed action with the largest logit and reports ``q`` of that bin as the decision's score.

A missing, corrupt or incompatible model (other feature schema version, other action space,
checksum mismatch, onnxruntime missing) never raises: the policy logs ONE warning at load and
uses the heuristic (the exact reward of every allowed bin, :mod:`edgeplane_contract.policy.heuristic`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from edgeplane_contract.policy.actions import (
    ACTION_SPEC,
    DECLINE,
    DECLINE_REWARD,
    N_ACTIONS,
    N_BINS,
    apply_bin,
    mask_entry,
    requested_bin,
)
from edgeplane_contract.policy.errors import ModelIncompatibleError, ModelLoadError
from edgeplane_contract.policy.features import (
    FEATURE_SCHEMA_VERSION,
    N_FEATURES,
    NodeView,
    Offer,
    interference_prior,
    write_features,
)
from edgeplane_contract.policy.weights import validate_weights

__all__ = ["DEFAULT_MODEL_PATH", "Decision", "LocalPolicy", "Source"]

log = logging.getLogger("edgeplane.agent.policy")

DEFAULT_MODEL_PATH = Path(__file__).parent / "model" / "local_policy.int8.onnx"
METADATA_NAME = "metadata.json"
_QUANTIZED_OPS = (b"DequantizeLinear", b"MatMulInteger", b"QLinearMatMul", b"DynamicQuantizeLinear")

Source = Literal["onnx-int8", "onnx-fp32", "heuristic"]


@dataclass(slots=True)
class Decision:
    """What the local policy decided for one offer.

    ``action`` is the bin (0..63) or 64 for decline/offload. ``cpu``/``memory``/``gpu_units``/
    ``accelerator`` are the chosen quotas (zeros and ``"none"`` when declined). ``score`` is the
    reward value of the chosen action under the weights passed in, in the reward's units: the
    model's predicted ``R`` of the bin (its ``q`` output, ``source="onnx-int8"``), or the exact
    ``R`` from ``reward()`` (``source="heuristic"``); a decline scores :data:`DECLINE_REWARD`
    (0.0). The hub can compare scores across nodes that use the same base weights: higher is
    better, and a node on a draining battery scores lower because its w3 is higher. ``masked``
    is how many of the 64 bins the mask removed; ``latency_us`` the wall time of the whole
    decision (features, mask, inference). ``requested_score`` is the value, in the same units,
    of running the offer exactly as requested (:func:`~edgeplane_contract.policy.actions.requested_bin`),
    None when that bin is masked: the hub places replicas with their requested quotas, so that
    is the figure it compares across nodes.
    """

    action: int
    decline: bool
    cpu: float
    memory: float
    gpu_units: float
    accelerator: str
    score: float
    masked: int
    source: Source
    latency_us: float
    requested_score: float | None = None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_metadata(path: Path, meta: dict[str, Any]) -> None:
    """Raise ModelIncompatibleError unless the metadata matches this runtime."""
    expected: list[tuple[str, object, object]] = [
        ("feature_schema_version", FEATURE_SCHEMA_VERSION, meta.get("feature_schema_version")),
        ("n_features", N_FEATURES, meta.get("n_features")),
        ("interference_prior", interference_prior(), meta.get("interference_prior")),
    ]
    actions = meta.get("actions")
    if not isinstance(actions, dict):
        raise ModelIncompatibleError(str(path), "actions", ACTION_SPEC, actions)
    for key, value in ACTION_SPEC.items():
        expected.append((f"actions.{key}", value, actions.get(key)))
    for field, want, found in expected:
        if want != found:
            raise ModelIncompatibleError(str(path), field, want, found)


class LocalPolicy:
    """The node-local policy. Build with :meth:`load`; call :meth:`decide` per offer."""

    def __init__(
        self,
        *,
        path: Path,
        session: Any | None,
        metadata: dict[str, Any],
        fallback_reason: str | None,
    ) -> None:
        self.path = path
        self.metadata = metadata
        self.fallback_reason = fallback_reason
        self._session = session
        self._input = session.get_inputs()[0].name if session is not None else ""
        self._outputs = ["q", "logits"]
        self.source: Source = "heuristic"
        if session is not None:
            # An unquantized model (the fp32 export, for comparisons) says so in its decisions.
            quantized = any(op in path.read_bytes() for op in _QUANTIZED_OPS)
            self.source = "onnx-int8" if quantized else "onnx-fp32"
        # One decision at a time through pre-bound buffers: the features are written into the
        # input the session reads and the outputs land in arrays we own, which saves the
        # per-call input conversion and output allocation of ``session.run`` (about a third of
        # a one-row call). The lock makes ``decide`` safe from several threads.
        self._lock = threading.Lock()
        self._x = np.zeros((1, N_FEATURES), dtype=np.float32)
        self._q = np.zeros((1, N_BINS), dtype=np.float32)
        self._logits = np.zeros((1, N_ACTIONS), dtype=np.float32)
        self._binding: Any = None
        if session is not None:
            self._binding = session.io_binding()
            self._binding.bind_cpu_input(self._input, self._x)
            for name, array in (("q", self._q), ("logits", self._logits)):
                self._binding.bind_output(name, "cpu", 0, np.float32, list(array.shape), array.ctypes.data)

    @classmethod
    def load(cls, path: str | None = None) -> LocalPolicy:
        """Load the model at ``path`` (default: the shipped int8 model) and its ``metadata.json``.

        Never raises for a bad model: logs one warning and returns a heuristic policy.
        """
        model_path = Path(path) if path is not None else DEFAULT_MODEL_PATH
        try:
            session, metadata = cls._open(model_path)
        except Exception as exc:  # whatever is wrong with the files, the agent keeps deciding
            error = exc if isinstance(exc, ModelLoadError) else ModelLoadError(str(model_path), repr(exc))
            log.warning(
                "local policy model unusable (%s); falling back to the reward heuristic", error.reason
            )
            return cls(path=model_path, session=None, metadata={}, fallback_reason=str(error))
        return cls(path=model_path, session=session, metadata=metadata, fallback_reason=None)

    @classmethod
    def load_strict(cls, path: str | Path) -> LocalPolicy:
        """As :meth:`load`, but a model that cannot be used raises (ModelLoadError or
        ModelIncompatibleError, with the reason) instead of falling back: for checking an
        uploaded or fetched model before it is kept."""
        model_path = Path(path)
        try:
            session, metadata = cls._open(model_path)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(str(model_path), repr(exc)) from None
        return cls(path=model_path, session=session, metadata=metadata, fallback_reason=None)

    @classmethod
    def heuristic(cls) -> LocalPolicy:
        """A policy that always uses the heuristic (no model, no warning): for comparisons."""
        return cls(path=DEFAULT_MODEL_PATH, session=None, metadata={}, fallback_reason="heuristic requested")

    @staticmethod
    def _open(path: Path) -> tuple[Any, dict[str, Any]]:
        meta_path = path.parent / METADATA_NAME
        try:
            metadata = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelLoadError(str(path), f"no {METADATA_NAME} next to the model") from None
        except (OSError, ValueError) as exc:
            raise ModelLoadError(str(path), f"unreadable {METADATA_NAME}: {exc}") from None
        if not isinstance(metadata, dict):
            raise ModelLoadError(str(path), f"{METADATA_NAME} is not a JSON object")
        _check_metadata(path, metadata)
        if not path.is_file():
            raise ModelLoadError(str(path), "model file not found")
        # The checksum is enforced when metadata.json records one for this file name.
        files = metadata.get("files")
        entry = files.get(path.name) if isinstance(files, dict) else None
        want = entry.get("sha256") if isinstance(entry, dict) else None
        if want is not None and want != _sha256(path):
            raise ModelLoadError(str(path), "model file does not match the checksum in metadata.json")
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ModelLoadError(str(path), f"onnxruntime unavailable: {exc}") from None
        options = ort.SessionOptions()
        # One core: the agent shares its node with the work it schedules.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types for corrupt files
            raise ModelLoadError(str(path), f"onnxruntime cannot load it: {exc}") from None
        shape_in = session.get_inputs()[0].shape
        if len(shape_in) != 2 or shape_in[1] != N_FEATURES:
            raise ModelIncompatibleError(str(path), "input shape", ["N", N_FEATURES], shape_in)
        outputs = {o.name: o.shape for o in session.get_outputs()}
        for name, width in (("q", N_BINS), ("logits", N_ACTIONS)):
            shape = outputs.get(name)
            if shape is None or len(shape) != 2 or shape[1] != width:
                raise ModelIncompatibleError(str(path), f"output {name!r}", ["N", width], shape)
        return session, metadata

    @property
    def uses_model(self) -> bool:
        return self._session is not None

    def outputs(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's (q (N, 64), logits (N, 65)) for a feature batch of shape (N, N_FEATURES)."""
        if self._session is None:
            raise RuntimeError("no model loaded (heuristic fallback)")
        q, logits = self._session.run(self._outputs, {self._input: x})
        return q, logits

    def decide(self, node: NodeView, offer: Offer, weights: tuple[float, float, float, float]) -> Decision:
        """Pick the bin (or decline) for ``offer`` on ``node`` under effective weights w1..w4.

        ``weights`` are the weights to optimise *now*: w3 already adapted to the node's power
        source (see :func:`edgeplane_contract.policy.weights.effective_weights`).
        """
        start = time.perf_counter()
        w = validate_weights(weights)
        mask, blocked, masked = mask_entry(node, offer)
        as_requested = requested_bin(offer)
        requested_score: float | None = None
        if self._session is not None:
            with self._lock:
                write_features(node, offer, w, self._x[0])
                self._session.run_with_iobinding(self._binding)
                row = self._logits[0]
                np.copyto(row, -np.inf, where=blocked)
                best = int(row.argmax())
                score = float(self._q[0, best]) if best < N_BINS else DECLINE_REWARD
                if mask[as_requested]:
                    requested_score = float(self._q[0, as_requested])
            source = self.source
            decline = best == DECLINE
        else:
            from edgeplane_contract.policy.heuristic import action_rewards

            rewards = action_rewards(node, offer, w, mask)
            best = int(np.argmax(rewards[:N_BINS]))
            score = float(rewards[best])
            if mask[as_requested]:
                requested_score = float(rewards[as_requested])
            source = "heuristic"
            decline = not score > DECLINE_REWARD
        if decline:
            decision = Decision(
                DECLINE, True, 0.0, 0.0, 0.0, "none", DECLINE_REWARD, masked, source, 0.0, requested_score
            )
        else:
            cpu, memory, gpu_units, accelerator = apply_bin(offer, best)
            decision = Decision(
                best, False, cpu, memory, gpu_units, accelerator, score, masked, source, 0.0, requested_score
            )
        decision.latency_us = (time.perf_counter() - start) * 1e6
        return decision

    def info(self) -> dict[str, Any]:
        """Model facts: path, size, opset, quantized, source, fallback reason, metadata."""
        out: dict[str, Any] = {
            "path": str(self.path),
            "source": self.source,
            "fallback_reason": self.fallback_reason,
            "feature_schema_version": FEATURE_SCHEMA_VERSION,
        }
        try:
            blob = self.path.read_bytes()
        except OSError:
            blob = b""
        out["file_bytes"] = len(blob) if blob else None
        if self._session is not None:
            meta = self._session.get_modelmeta()
            custom = dict(meta.custom_metadata_map)
            out["opset"] = (
                int(custom["opset"]) if "opset" in custom else self.metadata.get("model", {}).get("opset")
            )
            out["producer"] = meta.producer_name
        else:
            out["opset"] = None
        out["quantized"] = any(op in blob for op in _QUANTIZED_OPS) if blob else None
        out["metadata"] = self.metadata
        return out
