"""funnel: local-first two-stage retrieval.

    import funnel
    pipeline = funnel.open(".funnel")          # embedded LanceDB index, packaged MiniLM embedder
    pipeline.ingest(["docs/"])
    for doc in pipeline.search("who is the CEO?").documents: ...
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from funnel.errors import FunnelError

if TYPE_CHECKING:
    from funnel.pipeline import Pipeline, SearchConfig

__all__ = ["FunnelError", "Pipeline", "SearchConfig", "open"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import funnel.rerank` does not pull in the store, the loaders and their libraries.
    if name in ("Pipeline", "SearchConfig"):
        from funnel import pipeline

        return getattr(pipeline, name)
    raise AttributeError(name)


def open(path: str | Path = ".funnel", embedder: str = "minilm", **search_config) -> Pipeline:  # noqa: A001
    """A pipeline over the index at `path`: a directory (created on first ingest) or a
    `postgresql://` URL (see `funnel.index.open_store`)."""
    from funnel.embed import load_embedder
    from funnel.index import open_store
    from funnel.pipeline import Pipeline, SearchConfig

    return Pipeline(open_store(path), load_embedder(embedder), config=SearchConfig(**search_config))
