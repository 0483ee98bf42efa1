"""funnel: local-first two-stage retrieval.

    import funnel
    pipeline = funnel.open(".funnel")          # embedded LanceDB index, packaged MiniLM, built-in reranker
    pipeline.ingest(["docs/"])
    pipeline.calibrate()                       # optional: measure whether the reranker helps on this corpus
    for doc in pipeline.search("who is the CEO?").documents: ...
    print(pipeline.ask("who is the CEO?").text)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from funnel.errors import FunnelError

if TYPE_CHECKING:
    from funnel.engine_config import EngineConfig
    from funnel.pipeline import Pipeline
    from funnel.rerank.base import Reranker

__all__ = ["EngineConfig", "FunnelError", "Pipeline", "SearchConfig", "open"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import funnel.rerank` does not pull in the store, the loaders and their libraries.
    if name == "Pipeline":
        from funnel.pipeline import Pipeline

        return Pipeline
    if name in ("EngineConfig", "SearchConfig"):  # SearchConfig(**flat): the flat form of earlier releases
        from funnel.engine_config import EngineConfig

        return EngineConfig if name == "EngineConfig" else EngineConfig.of
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
    - `search_config`: the flat names of `EngineConfig.of` (`k`, `candidates`, `policy`, `guaranteed`, ...).
      The default
      policy `auto` follows the index's calibration (`pipeline.calibrate()`); uncalibrated, it keeps the
      first stage's order and says why in `rerank_reason`.
    - `analyzer`: BM25 analysis for a new index (`funnel.analyze`: auto, english, cjk, korean); an existing
      index keeps its own."""
    from funnel.engine_config import EngineConfig
    from funnel.pipeline import FROM_CONFIG, Pipeline

    config = EngineConfig.of(index=str(path), embedder=embedder, **search_config)
    if analyzer is not None:
        config = replace(config, ingest=replace(config.ingest, analyzer=analyzer))
    if isinstance(reranker, str):
        config = config.with_rerank(backend=reranker)
    return Pipeline.build(config, reranker=FROM_CONFIG if isinstance(reranker, str) else _cached(reranker))


def _cached(reranker: Reranker | None) -> Reranker | None:
    from funnel.rerank.cache import CachedReranker

    return CachedReranker(reranker) if reranker is not None else None
