"""Ingest: find source files, load them into sections, cut sections into token-sized chunks."""

from __future__ import annotations

from pathlib import Path

from funnel.errors import ConfigError
from funnel.ingest.chunk import chunk_document, context_line
from funnel.ingest.code import load_code
from funnel.ingest.loaders import BY_KIND, LOADERS, Loader
from funnel.ingest.pdf import load_pdf
from funnel.ingest.text import load_markdown, load_text
from funnel.ingest.walk import DiscoveryResult, SourceFile, discover
from funnel.types import LoadedDocument

__all__ = [
    "LOADERS",
    "DiscoveryResult",
    "Loader",
    "SourceFile",
    "chunk_document",
    "context_line",
    "discover",
    "load",
    "load_code",
    "load_markdown",
    "load_pdf",
    "load_text",
]


def load(source: SourceFile, doc_id: str, display_path: str, pages=None) -> LoadedDocument:
    """Load one discovered file with the loader for its kind; `IngestError` for a file it cannot read.
    `pages(display_path, read, total)` hears a PDF's progress."""
    loader = BY_KIND.get(source.kind)
    if loader is None:
        *others, last = (k.value for k in BY_KIND)
        raise ConfigError(f"unknown source kind {source.kind!r}; expected {', '.join(others)} or {last}")
    return loader.read(Path(source.path), doc_id, display_path, source.language, pages)
