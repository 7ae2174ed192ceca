"""Write the trained MLP as an ONNX graph built with ``onnx.helper`` (no framework export).

The graph is ``features [N, F] -> (MatMul, Add, Relu) x hidden`` and two heads on the last
hidden layer: ``q [N, 64]`` (predicted reward per bin) and ``logits [N, 65]`` (policy over the
bins and decline). Masking stays outside the model, in the runtime, in exact arithmetic.
The model's ``metadata_props`` repeat the schema version and opset so ``edge-agent policy
info`` can report them without the ``onnx`` package.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeplane_contract.policy.actions import N_ACTIONS, N_BINS
from edgeplane_contract.policy.features import FEATURE_SCHEMA_VERSION, N_FEATURES

from controlplane.policy.train import MLP, N_OUTPUTS

__all__ = ["INPUT_NAME", "LOGITS_NAME", "OPSET", "Q_NAME", "build_model", "export_onnx", "node_names"]

OPSET = 17
INPUT_NAME = "features"
Q_NAME = "q"
LOGITS_NAME = "logits"


def node_names(model: MLP) -> list[str]:
    """Names of the MatMul nodes, first layer first (for quantisation exclusions)."""
    return [f"layer{i}/MatMul" for i in range(len(model.layers) - 1)] + [
        f"{Q_NAME}/MatMul",
        f"{LOGITS_NAME}/MatMul",
    ]


def build_model(model: MLP) -> object:
    """The ``onnx.ModelProto`` of ``model``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if model.sizes[0] != N_FEATURES or model.sizes[-1] != N_OUTPUTS:
        raise ValueError(
            f"model maps {model.sizes[0]} -> {model.sizes[-1]}, expected {N_FEATURES} -> {N_OUTPUTS}"
        )
    nodes = []
    inits = []

    def dense(x: str, w: np.ndarray, b: np.ndarray, name: str, out: str) -> None:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w, dtype=np.float32), f"{name}.weight"))
        inits.append(numpy_helper.from_array(np.ascontiguousarray(b, dtype=np.float32), f"{name}.bias"))
        nodes.append(helper.make_node("MatMul", [x, f"{name}.weight"], [f"{name}.mm"], name=f"{name}/MatMul"))
        nodes.append(helper.make_node("Add", [f"{name}.mm", f"{name}.bias"], [out], name=f"{name}/Add"))

    h = INPUT_NAME
    for i, (w, b) in enumerate(model.layers[:-1]):
        dense(h, w, b, f"layer{i}", f"layer{i}.pre")
        nodes.append(helper.make_node("Relu", [f"layer{i}.pre"], [f"layer{i}.out"], name=f"layer{i}/Relu"))
        h = f"layer{i}.out"
    w, b = model.layers[-1]
    dense(h, w[:, :N_BINS], b[:N_BINS], Q_NAME, Q_NAME)
    dense(h, w[:, N_BINS:], b[N_BINS:], LOGITS_NAME, LOGITS_NAME)
    graph = helper.make_graph(
        nodes,
        "edgeplane_local_policy",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", N_FEATURES])],
        [
            helper.make_tensor_value_info(Q_NAME, TensorProto.FLOAT, ["N", N_BINS]),
            helper.make_tensor_value_info(LOGITS_NAME, TensorProto.FLOAT, ["N", N_ACTIONS]),
        ],
        initializer=inits,
    )
    proto = helper.make_model(
        graph,
        producer_name="edgeplane.controlplane.policy",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    # IR 8 is what opset 17 needs; older onnxruntime builds on edge boxes still read it.
    proto.ir_version = 8
    helper.set_model_props(
        proto,
        {
            "feature_schema_version": str(FEATURE_SCHEMA_VERSION),
            "n_features": str(N_FEATURES),
            "n_bins": str(N_BINS),
            "opset": str(OPSET),
        },
    )
    onnx.checker.check_model(proto)
    return proto


def export_onnx(model: MLP, path: str | Path) -> Path:
    """Write the fp32 model to ``path``."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    proto = build_model(model)
    assert isinstance(proto, onnx.ModelProto)
    onnx.save_model(proto, str(path))
    return path
