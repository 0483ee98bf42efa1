"""A plain numpy BERT encoder: the reference the ONNX graphs built by funnel.onnx.build are checked
against (embedder and cross-encoder tests share it)."""

from __future__ import annotations

from math import erf

import numpy as np


def dense(w: dict[str, np.ndarray], x: np.ndarray, key: str) -> np.ndarray:
    return x @ w[f"{key}.weight"].T + w[f"{key}.bias"]


def encode(
    w: dict[str, np.ndarray], ids: np.ndarray, mask: np.ndarray, types: np.ndarray, heads: int, layers: int,
    eps: float,
) -> np.ndarray:
    """Hidden states [batch, seq, hidden] of BertModel, written out plainly."""

    def layer_norm(x: np.ndarray, key: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[f"{key}.weight"] + w[f"{key}.bias"]

    batch, seq = ids.shape
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:seq]
        + w["embeddings.token_type_embeddings.weight"][types]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    bias = np.where(mask[:, None, None, :] == 1, 0.0, -1e30)
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, seq, heads, -1).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(w, x, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        x = layer_norm(dense(w, context, f"{p}attention.output.dense") + x, f"{p}attention.output.LayerNorm")
        hidden = dense(w, x, f"{p}intermediate.dense")
        hidden = 0.5 * hidden * (1 + np.vectorize(erf)(hidden / np.sqrt(2)))
        x = layer_norm(dense(w, hidden, f"{p}output.dense") + x, f"{p}output.LayerNorm")
    return x


def random_layer_weights(rand, layers: int, hidden: int, intermediate: int) -> dict[str, np.ndarray]:
    """The encoder layers of a random BertModel, named as its state dict names them; `rand(*shape)` draws."""
    h, inter = hidden, intermediate
    w: dict[str, np.ndarray] = {}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (out_dim, in_dim) in {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (inter, h),
            "output.dense": (h, inter),
        }.items():
            w[f"{p}{name}.weight"], w[f"{p}{name}.bias"] = rand(out_dim, in_dim), rand(out_dim)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}{ln}.weight"], w[f"{p}{ln}.bias"] = 1 + rand(h), rand(h)
    return w
