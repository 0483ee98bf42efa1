"""funnel: local-first two-stage retrieval.

    import funnel
    pipeline = funnel.open(".funnel")          # embedded LanceDB index, packaged MiniLM, built-in reranker
    pipeline.ingest(["docs/"])
    pipeline.calibrate()                       # optional: measure whether the reranker helps on this corpus
    for doc in pipeline.search("who is the CEO?").documents: ...
    print(pipeline.ask("who is the CEO?").text)
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from funnel.errors import FunnelError

if TYPE_CHECKING:
    from funnel.pipeline import Pipeline, SearchConfig
    from funnel.rerank.base import Reranker

__all__ = ["FunnelError", "Pipeline", "SearchConfig", "open"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import funnel.rerank` does not pull in the store, the loaders and their libraries.
    if name in ("Pipeline", "SearchConfig"):
        from funnel import pipeline

        return getattr(pipeline, name)
    raise AttributeError(name)


def open(  # noqa: A001
    path: str | Path = ".funnel",
    embedder: str | None = None,
    reranker: str | Reranker | None = "builtin",
    analyzer: str | None = None,
    **search_config,
) -> Pipeline:
    """A pipeline over the index at `path`: a directory (created on first ingest) or a `postgresql://` URL
    (see `funnel.index.open_store`).

    - `embedder`: a spec (`minilm`, `hashing`, a model directory, `st:NAME`); by default the one the index
      was built with, else `minilm`.
    - `reranker`: a spec as in `funnel.toml` (`builtin`, `none`, `onnx:DIR`, `tei:URL`, ...) or a `Reranker`.
    - `search_config`: `SearchConfig`'s fields (`k`, `candidates`, `policy`, `guaranteed`, ...). The default
      policy `auto` follows the index's calibration (`pipeline.calibrate()`); uncalibrated, it keeps the
      first stage's order and says why in `rerank_reason`.
    - `analyzer`: BM25 analysis for a new index (`funnel.analyze`: auto, english, cjk, korean); an existing
      index keeps its own."""
    from funnel.embed import index_embedder, load_embedder
    from funnel.index import open_store
    from funnel.pipeline import Pipeline, SearchConfig
    from funnel.rerank import RerankPolicy, load_reranker
    from funnel.rerank.cache import CachedReranker

    store = open_store(path)
    loaded = load_embedder(embedder or index_embedder(store))
    if isinstance(reranker, str):
        reranker = load_reranker(reranker)
    if isinstance(search_config.get("policy"), str):
        search_config["policy"] = RerankPolicy.parse(search_config["policy"])
    second = CachedReranker(reranker) if reranker is not None else None
    return Pipeline(store, loaded, second, config=SearchConfig(**search_config), analyzer=analyzer)
