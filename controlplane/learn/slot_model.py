"""The PPO placement policy as an ONNX graph, built with ``onnx.helper`` from plain arrays.

The trained :class:`~.slot_policy.SlotExtractor` scores each node slot with one small network and
*defer* from the candidates' mean embedding. Written with one row per **candidate** (no padding,
no slot limit), the graph is::

    slots [K, C]  ->  scores [K]   (actor_node: Linear-Tanh-Linear-Tanh-Linear, per row)
                  ->  defer  [1]   (actor_defer on [mean_k actor_embed(row_k), fleet values])

with ``C = len(NODE_COLUMNS) + len(GLOBAL_COLUMNS)`` (each row: its node columns, then the fleet
values repeated). Over the candidate rows this is exactly the trained network's masked logits:
its pooling is a mean over candidate slots, and the per-slot networks do not see the others.
So one exported model places on fleets of any size, which the live hub needs.

Torch is not needed here: :func:`build_model` takes NumPy arrays (``ppo.export_weights`` reads
them out of a ``model.zip``; tests build models from random arrays). The ``metadata_props``
carry the columns, so a model trained on other columns is refused at load
(:mod:`.chooser`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from controlplane.learn.observe import GLOBAL_COLUMNS, NODE_COLUMNS

__all__ = [
    "DEFER_NAME",
    "INPUT_NAME",
    "KIND",
    "OPSET",
    "SCORES_NAME",
    "SlotWeights",
    "build_model",
    "columns_digest",
    "random_weights",
    "save_model",
]

OPSET = 17
INPUT_NAME = "slots"
SCORES_NAME = "scores"
DEFER_NAME = "defer"
KIND = "edgeplane.placement.slot-policy"

Layer = tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]  # weight [in, out], bias [out]


def columns_digest() -> str:
    """What a model's input rows mean: a digest of the column names, in order."""
    text = "\n".join((*NODE_COLUMNS, "--", *GLOBAL_COLUMNS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SlotWeights:
    """The actor's three networks as (weight [in, out], bias [out]) layers, tanh between them."""

    node: tuple[Layer, ...]  # per row -> 1 (the node's logit)
    embed: tuple[Layer, ...]  # per row -> hidden
    defer: tuple[Layer, ...]  # [pooled embedding, fleet values] -> 1

    def __post_init__(self) -> None:
        width = len(NODE_COLUMNS) + len(GLOBAL_COLUMNS)
        for name, layers, n_in, n_out in (
            ("node", self.node, width, 1),
            ("embed", self.embed, width, None),
            ("defer", self.defer, None, 1),
        ):
            if not layers:
                raise ValueError(f"{name}: no layers")
            if n_in is not None and layers[0][0].shape[0] != n_in:
                raise ValueError(f"{name}: takes {layers[0][0].shape[0]} inputs, the columns are {n_in}")
            if n_out is not None and layers[-1][0].shape[1] != n_out:
                raise ValueError(f"{name}: gives {layers[-1][0].shape[1]} outputs, not {n_out}")
            for (w, b), (w_next, _) in itertools.pairwise(layers):
                if w.shape[1] != w_next.shape[0] or b.shape != (w.shape[1],):
                    raise ValueError(f"{name}: layer shapes do not chain")
        if self.defer[0][0].shape[0] != self.embed[-1][0].shape[1] + len(GLOBAL_COLUMNS):
            raise ValueError("defer: its input is not the embedding and the fleet values")


def random_weights(hidden: int = 16, seed: int = 0) -> SlotWeights:
    """Weights drawn at random (tests, and a model's shape without training)."""
    rng = np.random.default_rng(seed)
    width = len(NODE_COLUMNS) + len(GLOBAL_COLUMNS)

    def mlp(n_in: int, n_out: int | None) -> tuple[Layer, ...]:
        sizes = [n_in, hidden, hidden] + ([n_out] if n_out is not None else [])
        return tuple(
            (
                (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
                (0.1 * rng.standard_normal(b)).astype(np.float32),
            )
            for a, b in itertools.pairwise(sizes)
        )

    return SlotWeights(node=mlp(width, 1), embed=mlp(width, None), defer=mlp(hidden + len(GLOBAL_COLUMNS), 1))


def build_model(weights: SlotWeights, metadata: Mapping[str, str] | None = None) -> object:
    """The ``onnx.ModelProto`` of ``weights`` (inputs and outputs in the module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[object] = []
    inits: list[object] = []

    def const(name: str, value: npt.NDArray[np.generic]) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def mlp(x: str, layers: tuple[Layer, ...], prefix: str) -> str:
        h = x
        for i, (w, b) in enumerate(layers):
            wn = const(f"{prefix}.{i}.weight", np.ascontiguousarray(w, dtype=np.float32))
            bn = const(f"{prefix}.{i}.bias", np.ascontiguousarray(b, dtype=np.float32))
            nodes.append(
                helper.make_node("MatMul", [h, wn], [f"{prefix}.{i}.mm"], name=f"{prefix}.{i}/MatMul")
            )
            nodes.append(
                helper.make_node(
                    "Add", [f"{prefix}.{i}.mm", bn], [f"{prefix}.{i}.out"], name=f"{prefix}.{i}/Add"
                )
            )
            h = f"{prefix}.{i}.out"
            if i < len(layers) - 1:
                nodes.append(helper.make_node("Tanh", [h], [f"{prefix}.{i}.tanh"], name=f"{prefix}.{i}/Tanh"))
                h = f"{prefix}.{i}.tanh"
        return h

    width = len(NODE_COLUMNS)
    total = width + len(GLOBAL_COLUMNS)
    node_out = mlp(INPUT_NAME, weights.node, "node")
    shape = const("scores.shape", np.array([-1], dtype=np.int64))
    nodes.append(helper.make_node("Reshape", [node_out, shape], [SCORES_NAME], name="scores/Reshape"))
    embed = mlp(INPUT_NAME, weights.embed, "embed")
    pooled = "embed.pooled"
    nodes.append(helper.make_node("ReduceMean", [embed], [pooled], axes=[0], keepdims=1, name="embed/Mean"))
    starts = const("fleet.starts", np.array([width], dtype=np.int64))
    ends = const("fleet.ends", np.array([total], dtype=np.int64))
    axes = const("fleet.axes", np.array([1], dtype=np.int64))
    nodes.append(
        helper.make_node("Slice", [INPUT_NAME, starts, ends, axes], ["fleet.rows"], name="fleet/Slice")
    )
    nodes.append(
        helper.make_node("ReduceMean", ["fleet.rows"], ["fleet"], axes=[0], keepdims=1, name="fleet/Mean")
    )
    nodes.append(helper.make_node("Concat", [pooled, "fleet"], ["defer.in"], axis=1, name="defer/Concat"))
    defer_out = mlp("defer.in", weights.defer, "defer")
    nodes.append(helper.make_node("Reshape", [defer_out, shape], [DEFER_NAME], name="defer/Reshape"))
    graph = helper.make_graph(
        nodes,  # type: ignore[arg-type]
        "edgeplane_slot_policy",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["candidates", total])],
        [
            helper.make_tensor_value_info(SCORES_NAME, TensorProto.FLOAT, ["candidates"]),
            helper.make_tensor_value_info(DEFER_NAME, TensorProto.FLOAT, [1]),
        ],
        initializer=inits,  # type: ignore[arg-type]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edgeplane"
    )
    model.ir_version = 8
    props = {
        "kind": KIND,
        "columns_digest": columns_digest(),
        "node_columns": json.dumps(list(NODE_COLUMNS)),
        "global_columns": json.dumps(list(GLOBAL_COLUMNS)),
        "opset": str(OPSET),
        **dict(metadata or {}),
    }
    helper.set_model_props(model, props)
    onnx.checker.check_model(model)
    return model


def save_model(weights: SlotWeights, path: Path, metadata: Mapping[str, str] | None = None) -> Path:
    """Build and write the model (its parent made if missing)."""
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(weights, metadata), str(path))  # type: ignore[arg-type]
    return path
