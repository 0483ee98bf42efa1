"""Reading a BERT-family safetensors checkpoint: its config, its weights and a hash of what was read."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from funnel.errors import BackendUnavailable, ConfigError
from funnel.onnx.layout import BUILDER_VERSION

# Prefixes that sentence-transformers / transformers put in front of BertModel weight names.
_WEIGHT_PREFIXES = ("", "bert.", "0.auto_model.", "0.auto_model.bert.", "model.")
_SOURCE_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackendUnavailable(f"model file missing: {path}") from None


def read_config(src_dir: Path) -> BertConfig:
    raw = _read_json(src_dir / "config.json")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{src_dir}: only absolute position embeddings are supported")
    if raw.get("hidden_act", "gelu") != "gelu":
        raise ConfigError(f"{src_dir}: only hidden_act=gelu (erf) is supported, got {raw['hidden_act']}")
    return BertConfig(
        hidden=int(raw["hidden_size"]),
        heads=int(raw["num_attention_heads"]),
        layers=int(raw["num_hidden_layers"]),
        intermediate=int(raw["intermediate_size"]),
        eps=float(raw.get("layer_norm_eps", 1e-12)),
        max_positions=int(raw.get("max_position_embeddings", 512)),
    )


def read_pooling(src_dir: Path) -> str:
    """Only mean pooling is built; refuse other sentence-transformers heads rather than mis-embed."""
    path = src_dir / "1_Pooling" / "config.json"
    if not path.is_file():
        return "mean"
    modes = {k: v for k, v in _read_json(path).items() if k.startswith("pooling_mode_") and v}
    if list(modes) != ["pooling_mode_mean_tokens"]:
        raise ConfigError(f"{src_dir}: only mean pooling is supported, found {sorted(modes)}")
    return "mean"


def read_max_seq_length(src_dir: Path, config: BertConfig) -> int:
    path = src_dir / "sentence_bert_config.json"
    declared = int(_read_json(path).get("max_seq_length", config.max_positions)) if path.is_file() else 0
    return min(declared or config.max_positions, config.max_positions)


def load_weights(src_dir: Path) -> dict[str, np.ndarray]:
    """BertModel weights keyed without prefix, as float32 (plus `classifier.*` when the checkpoint is a
    BertForSequenceClassification, whose head sits beside the `bert.` prefix)."""
    from safetensors.numpy import load_file

    path = src_dir / "model.safetensors"
    if not path.is_file():
        raise BackendUnavailable(f"model file missing: {path}")
    raw = load_file(str(path))
    for prefix in _WEIGHT_PREFIXES:
        if prefix + "embeddings.word_embeddings.weight" in raw:
            weights = {k[len(prefix) :]: v.astype(np.float32) for k, v in raw.items() if k.startswith(prefix)}
            for key in ("classifier.weight", "classifier.bias"):
                if key in raw:
                    weights[key] = raw[key].astype(np.float32)
            return weights
    raise ConfigError(f"{path}: no BertModel weights (embeddings.word_embeddings.weight) found")


def source_hash(src_dir: Path) -> str:
    """Identifies the checkpoint and the builder, so a cached build can be traced to what made it."""
    digest = hashlib.sha256(f"funnel-onnx-builder-{BUILDER_VERSION}".encode())
    for rel in _SOURCE_FILES:
        path = src_dir / rel
        if path.is_file():
            digest.update(rel.encode() + b"\0")
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()
