"""The ONNX graphs of a BERT encoder, node by node with `onnx.helper`: the sentence embedder (mean pooling,
L2 normalisation) and the cross-encoder ([CLS] pooler, one-label classifier).

The nodes follow the shapes PyTorch's exporter produces (Div by sqrt(2) -> Erf for GELU, MatMul + Add for
dense layers) so that onnxruntime's own fusions (Gelu, SkipLayerNormalization, ...) recognise them at load
time; the file itself stays unfused because dynamic quantisation works on plain MatMul nodes.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from funnel.errors import ConfigError
from funnel.onnx.checkpoint import BertConfig

OPSET = 17  # first opset with LayerNormalization; old enough for any onnxruntime >= 1.14
IR_VERSION = 8


class _Graph:
    """Collects nodes and initializers; every tensor gets a readable, deterministic name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        self._count += 1  # the counter keeps names unique (SSA) when a prefix is reused
        out = f"{name}/{op_type}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _f32(value: float) -> np.ndarray:
    return np.array(value, dtype=np.float32)


def _i64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _dense(g: _Graph, x: str, w: dict[str, np.ndarray], key: str, scale: float = 1.0) -> str:
    """x @ W^T + b, with W stored transposed because torch Linear keeps [out, in]."""
    weight = g.const(f"{key}.weight_t", (w[f"{key}.weight"] * scale).T)
    bias = g.const(f"{key}.bias", w[f"{key}.bias"] * scale)
    return g.op("Add", [g.op("MatMul", [x, weight], key), bias], key)


def _layer_norm(g: _Graph, x: str, w: dict[str, np.ndarray], key: str, eps: float) -> str:
    scale = g.const(f"{key}.weight", w[f"{key}.weight"])
    bias = g.const(f"{key}.bias", w[f"{key}.bias"])
    return g.op("LayerNormalization", [x, scale, bias], key, axis=-1, epsilon=eps)


def _gelu(g: _Graph, x: str, key: str) -> str:
    """0.5 * x * (1 + erf(x / sqrt(2))), in the order onnxruntime's GeluFusion looks for."""
    erf = g.op("Erf", [g.op("Div", [x, g.const(f"{key}.sqrt2", _f32(math.sqrt(2.0)))], key)], key)
    one_plus = g.op("Add", [erf, g.const(f"{key}.one", _f32(1.0))], key)
    return g.op("Mul", [g.op("Mul", [x, one_plus], key), g.const(f"{key}.half", _f32(0.5))], key)


def _embeddings(g: _Graph, w: dict[str, np.ndarray], cfg: BertConfig, token_types: bool = False) -> str:
    words = g.op(
        "Gather",
        [g.const("word_embeddings", w["embeddings.word_embeddings.weight"]), "input_ids"],
        "emb.word",
    )
    type_table = w["embeddings.token_type_embeddings.weight"]
    if token_types:  # a pair: the second segment has type 1
        types = g.op("Gather", [g.const("token_type_embeddings", type_table), "token_type_ids"], "emb.type")
        words = g.op("Add", [words, types], "emb.word_type")
        positions_table = w["embeddings.position_embeddings.weight"]
    else:
        # A single sentence is all type 0, so type 0 is folded into the position table.
        positions_table = w["embeddings.position_embeddings.weight"] + type_table[0]
    seq_len = g.op("Shape", ["input_ids"], "emb.seq_len", start=1, end=2)
    positions = g.op(
        "Slice",
        [
            g.const("position_embeddings", positions_table),
            g.const("emb.zero", _i64([0])),
            seq_len,
            g.const("emb.axis0", _i64([0])),
        ],
        "emb.pos",
    )
    summed = g.op("Add", [words, positions], "emb.sum")
    return _layer_norm(g, summed, w, "embeddings.LayerNorm", cfg.eps)


def _mask_bias(g: _Graph) -> str:
    """[B, S] 0/1 mask -> additive [B, 1, 1, S] bias: 0 where attended, float32 min where padded."""
    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const("mask.one", _f32(1.0)), mask], "mask.inv")
    bias = g.op("Mul", [inverted, g.const("mask.min", _f32(np.finfo(np.float32).min))], "mask.bias")
    return g.op("Unsqueeze", [bias, g.const("mask.axes", _i64([1, 2]))], "mask.bias4d")


def _attention(g: _Graph, x: str, mask_bias: str, w: dict[str, np.ndarray], cfg: BertConfig, key: str) -> str:
    split_heads = g.const(f"{key}.split", _i64([0, 0, cfg.heads, cfg.head_dim]))  # 0 = keep that dim
    merge_heads = g.const(f"{key}.merge", _i64([0, 0, cfg.hidden]))

    def heads(name: str, perm: list[int], scale: float = 1.0) -> str:
        projected = _dense(g, x, w, f"{key}.self.{name}", scale)
        return g.op(
            "Transpose",
            [g.op("Reshape", [projected, split_heads], f"{key}.{name}")],
            f"{key}.{name}",
            perm=perm,
        )

    # 1/sqrt(head_dim) is folded into the query projection: one Mul fewer per layer, same maths.
    q = heads("query", [0, 2, 1, 3], 1.0 / math.sqrt(cfg.head_dim))
    k = heads("key", [0, 2, 3, 1])  # already transposed for Q @ K^T
    v = heads("value", [0, 2, 1, 3])
    scores = g.op("Add", [g.op("MatMul", [q, k], f"{key}.scores"), mask_bias], f"{key}.scores")
    probs = g.op("Softmax", [scores], f"{key}.probs", axis=-1)
    context = g.op(
        "Transpose", [g.op("MatMul", [probs, v], f"{key}.context")], f"{key}.context", perm=[0, 2, 1, 3]
    )
    merged = g.op("Reshape", [context, merge_heads], f"{key}.merged")
    out = _dense(g, merged, w, f"{key}.output.dense")
    return _layer_norm(g, g.op("Add", [out, x], f"{key}.residual"), w, f"{key}.output.LayerNorm", cfg.eps)


def _feed_forward(g: _Graph, x: str, w: dict[str, np.ndarray], cfg: BertConfig, key: str) -> str:
    hidden = _gelu(g, _dense(g, x, w, f"{key}.intermediate.dense"), f"{key}.gelu")
    out = _dense(g, hidden, w, f"{key}.output.dense")
    return _layer_norm(g, g.op("Add", [out, x], f"{key}.residual"), w, f"{key}.output.LayerNorm", cfg.eps)


def _mean_pool_normalize(g: _Graph, x: str) -> str:
    """sentence-transformers Pooling(mean) then Normalize, with the same clamps (1e-9, 1e-12)."""
    mask = g.op(
        "Unsqueeze",
        [
            g.op("Cast", ["attention_mask"], "pool.mask", to=TensorProto.FLOAT),
            g.const("pool.axis2", _i64([2])),
        ],
        "pool.mask",
    )
    axis1 = g.const("pool.axis1", _i64([1]))
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask], "pool.masked"), axis1], "pool.sum", keepdims=0)
    count = g.op(
        "Max",
        [g.op("ReduceSum", [mask, axis1], "pool.count", keepdims=0), g.const("pool.eps", _f32(1e-9))],
        "pool.count",
    )
    mean = g.op("Div", [summed, count], "pool.mean")
    norm = g.op(
        "Max",
        [g.op("ReduceL2", [mean], "norm.l2", axes=[1], keepdims=1), g.const("norm.eps", _f32(1e-12))],
        "norm.l2",
    )
    return g.op("Div", [mean, norm], "norm.out")


def _encoder(g: _Graph, w: dict[str, np.ndarray], cfg: BertConfig, token_types: bool) -> str:
    x = _embeddings(g, w, cfg, token_types)
    mask_bias = _mask_bias(g)
    for i in range(cfg.layers):
        key = f"encoder.layer.{i}"
        x = _attention(g, x, mask_bias, w, cfg, f"{key}.attention")
        x = _feed_forward(g, x, w, cfg, key)
    return x


def _classifier(g: _Graph, x: str, w: dict[str, np.ndarray]) -> str:
    """BertForSequenceClassification's head: tanh(dense(h[CLS])) then the classifier, -> [B, labels]."""
    # A scalar index drops the sequence axis: [B, S, H] -> [B, H]. (const() would make it 1-d.)
    g.initializers.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "pooler.cls_index"))
    cls = g.op("Gather", [x, "pooler.cls_index"], "pooler.cls", axis=1)
    pooled = g.op("Tanh", [_dense(g, cls, w, "pooler.dense")], "pooler.tanh")
    return _dense(g, pooled, w, "classifier")


def _io(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])


def _finish(g: _Graph, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="funnel"
    )
    onnx.checker.check_model(model)
    # onnxruntime's SkipLayerNormalization fusion only fires when intermediate shapes are recorded.
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def build_graph(w: dict[str, np.ndarray], cfg: BertConfig, name: str) -> onnx.ModelProto:
    """The sentence embedder: encoder, mean pooling, L2 normalisation -> `sentence_embedding`."""
    g = _Graph()
    x = _encoder(g, w, cfg, token_types=False)
    g.nodes.append(
        helper.make_node("Identity", [_mean_pool_normalize(g, x)], ["sentence_embedding"], name="output")
    )
    outputs = [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", cfg.hidden])]
    return _finish(g, name, [_io("input_ids"), _io("attention_mask")], outputs)


def build_classifier_graph(w: dict[str, np.ndarray], cfg: BertConfig, name: str) -> onnx.ModelProto:
    """The cross-encoder: encoder with token types, [CLS] pooler, classifier -> `logits` [batch, 1]."""
    missing = [k for k in ("pooler.dense.weight", "classifier.weight") if k not in w]
    if missing:
        raise ConfigError(f"not a BertForSequenceClassification checkpoint: no {', '.join(missing)}")
    labels = w["classifier.weight"].shape[0]
    if labels != 1:
        raise ConfigError(f"a cross-encoder has one output label, this checkpoint has {labels}")
    g = _Graph()
    x = _encoder(g, w, cfg, token_types=True)
    g.nodes.append(helper.make_node("Identity", [_classifier(g, x, w)], ["logits"], name="output"))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])]
    return _finish(g, name, [_io("input_ids"), _io("attention_mask"), _io("token_type_ids")], outputs)
