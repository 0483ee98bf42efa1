"""From an error to the repository files that matter.

Three ranked lists of chunks are fused (weighted RRF) into one candidate window, which then goes through
the ordinary second stage (reranker + policy + fallback) and grouping to files:

1. **frames** — the chunk holding each stack frame's line, innermost in-repository frame first;
2. **symbols** — the files the text names by path ("seaborn/_core/scales.py"), the chunks defining the
   names the trace and the message carry (the symbol table), and the files of dotted module names;
3. **search** — funnel's hybrid first stage over exception type + message + those names.

A frame is the strongest evidence there is (the code that raised), so its list weighs most; with
`guaranteed_slots` the reranker cannot push the raising file out of the top. The weights are set by that
argument, not tuned (SWE-bench Lite, the only benchmark here, is a test set).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from funnel.apps.state.incident_schema import RankedFile
from funnel.apps.triage.frames import match_frames, trace_symbols
from funnel.apps.triage.stacktrace import Frame, ParsedError
from funnel.apps.triage.symbols import SymbolTable, mentioned_names
from funnel.index.base import Filter
from funnel.pipeline import MAX_QUERY_CHARS, Pipeline
from funnel.rerank.policies import RerankPolicy
from funnel.retrieve.first_stage import Ranking
from funnel.types import Chunk, DocumentHit, RerankStatus

MAX_FRAMES = 10
# The frames' list is fused with a small RRF k: the innermost frames' files must stay ahead of the next
# frame's even when that one is also named by symbols and found by search: 1/(1+1) - 1/(1+2) = 0.17 and
# 1/3 - 1/4 = 0.08 are more than the other lists can add at k=60 (1.5/61 + 1/61 = 0.04).
FRAME_RRF_K = 1.0
MAX_NAMES = 12
EXCERPT_LINES = 30


@dataclass(frozen=True)
class LocateConfig:
    k: int | None = None  # files returned; None: the pipeline's [search] k
    candidates: int | None = None  # the window; None: the pipeline's [search] candidates
    frame_weight: float = 1.0
    symbol_weight: float = 1.5  # names in the trace, files named by path
    mention_weight: float = 0.5  # code-like names in free text: many, and often incidental
    search_weight: float = 1.0
    use_trace: bool = True  # False: plain hybrid + rerank, for comparison in benchmarks
    policy: RerankPolicy | None = None  # None: the pipeline's


@dataclass(frozen=True)
class Localisation:
    files: list[RankedFile]
    documents: list[DocumentHit]
    rerank_status: RerankStatus
    rerank_reason: str
    notes: list[str]
    timings_ms: dict[str, float]


class FileLocator:
    """Ranks a code index's files for an error. Build once per index version (it reads the outline).

    Paths are reported relative to `repo_root` (as a trace or a person names them); without one, relative
    to the deepest folder holding every indexed file."""

    def __init__(self, pipeline: Pipeline, config: LocateConfig | None = None, repo_root: Path | None = None):
        self.pipeline = pipeline
        self.config = config or LocateConfig()
        outline = pipeline.store.outline()
        root = _root_of([e.doc_id for e in outline], repo_root)
        # Only files under the root are the repository's: an index may also hold a file a symlink led
        # the ingest to, or other documents; triage shows and searches none of them.
        self._rel = {e.doc_id: rel for e in outline if not (rel := _relative(e.doc_id, root)).startswith("/")}
        outline = [e for e in outline if e.doc_id in self._rel]
        self.symbols = SymbolTable(replace(e, path=self._rel[e.doc_id]) for e in outline)
        self._doc_ids = {path: doc_id for doc_id, path in self._rel.items()}

    def in_repository(self, doc_id: str) -> bool:
        return doc_id in self._rel

    def path_of(self, doc_id: str, fallback: str) -> str:
        """The repository-relative path of an indexed document."""
        return self._rel.get(doc_id, fallback)

    def query_for(self, parsed: ParsedError, text: str) -> tuple[str, list[str], list[str]]:
        """The search query, the code names the trace carries, and those the free text mentions."""
        trace_names = trace_symbols(parsed)[:MAX_NAMES] if self.config.use_trace else []
        text_names = [n for n in mentioned_names(text) if n not in trace_names][:MAX_NAMES]
        head = " ".join(p for p in (parsed.exception_type, parsed.message) if p)
        query = " ".join([head, text if text != parsed.message else "", *trace_names, *text_names]).strip()
        return query, trace_names, text_names

    def locate(self, parsed: ParsedError, text: str = "") -> Localisation:
        config, pipeline = self.config, self.pipeline
        started = time.perf_counter()
        text = text or parsed.message
        query, trace_names, text_names = self.query_for(parsed, text)
        notes: list[str] = []
        # Cut as Pipeline.search cuts: BM25 over a 100 KB query scans the index. `auto` (the default policy)
        # is what the repository index's calibration chose; uncalibrated, the first stage.
        request = replace(
            pipeline.plan(query[:MAX_QUERY_CHARS], k=config.k, policy=config.policy, filter=Filter(),
                          candidates=config.candidates),
            documents=frozenset(self._rel),
        )
        frame_chunks, frame_labels, symbol_chunks, mention_chunks = [], {}, [], []
        if config.use_trace:
            frame_chunks, frame_labels = self._frame_chunks(parsed.frames)
            # Strong: what the trace names, and files the text names by path. Weak: names in free text.
            symbol_chunks = self._definition_chunks(trace_names, self.symbols.mentioned_files(text))
            mention_chunks = self._definition_chunks(text_names)
            if parsed.frames and not frame_chunks:
                notes.append("no frame of the trace is a file of this repository")
        extra = [Ranking(tuple(frame_chunks), config.frame_weight, FRAME_RRF_K),
                 Ranking(tuple(symbol_chunks), config.symbol_weight), Ranking(tuple(mention_chunks), config.mention_weight)]
        search = pipeline.first_stage(request)
        candidates = pipeline.fuse(request, search, extra, config.search_weight)
        fused_ms = 1000 * (time.perf_counter() - started)
        second = pipeline.second_stage(request, candidates)
        documents = pipeline.group(request, second.hits)
        rerank_ms = 1000 * (time.perf_counter() - started) - fused_ms
        frame_files = {c.doc_id for c in frame_chunks}
        symbol_files = {c.doc_id for c in symbol_chunks + mention_chunks}
        search_files = {c.chunk.doc_id for c in search}
        files = []
        for doc in documents:
            best = doc.best.chunk
            signals = [s for s, ids in (("frame", frame_files), ("symbol", symbol_files),
                                        ("search", search_files)) if doc.doc_id in ids]
            path = self.path_of(doc.doc_id, doc.path)
            files.append(RankedFile(
                path=path, rank=doc.rank, score=round(doc.score, 6), signals=signals,
                frames=frame_labels.get(path, []), excerpt=_excerpt(best.text),
                line_start=best.line_start, line_end=best.line_end,
            ))
        return Localisation(files, documents, second.status, request.policy.reason or second.reason, notes,
                            {"first_stage": round(fused_ms, 1), "rerank": round(rerank_ms, 1)})

    # ---- the three lists --------------------------------------------------------------------------

    def _chunks_of(self, path: str) -> list[Chunk]:
        doc_id = self._doc_ids.get(path)
        return self.pipeline.store.get_chunks(doc_id) if doc_id else []

    def _frame_chunks(self, frames: tuple[Frame, ...]) -> tuple[list[Chunk], dict[str, list[str]]]:
        chunks: list[Chunk] = []
        labels: dict[str, list[str]] = {}
        # Every frame is tried (library frames match only when the repository is that library, e.g. a
        # site-packages/requests frame in the requests repository); the first MAX_FRAMES matches count.
        for match in match_frames(frames, self.symbols.paths)[:MAX_FRAMES]:
            frame = match.frame
            labels.setdefault(match.path, []).append(f"{frame.symbol or '?'}:{frame.line or '?'}")
            file_chunks = self._chunks_of(match.path)
            if not file_chunks:
                continue
            chunk = _chunk_at(file_chunks, frame.line)
            if chunk is None and frame.function:  # no line: the definition of the frame's function
                chunk = next((c for c in file_chunks if c.heading and
                              c.heading.split(".")[-1] == frame.function), None)
            chunks.append(chunk or file_chunks[0])
        return chunks, labels

    def _definition_chunks(self, names: list[str], paths: list[str] = ()) -> list[Chunk]:
        """The chunks defining `names` (and the first chunk of each file in `paths`), in order."""
        chunk_ids: list[tuple[str, str]] = [(path, "") for path in paths]  # (path, chunk_id or "" = first)
        for name in names:
            for definition in self.symbols.files_defining(name):
                chunk_ids.append((definition.path, definition.chunk_id))
            if "." in name:
                module = self.symbols.module_file(name)
                if module:
                    chunk_ids.append((module, ""))
        chunks: list[Chunk] = []
        for path, chunk_id in dict.fromkeys(chunk_ids):
            file_chunks = self._chunks_of(path)
            chosen = next((c for c in file_chunks if c.chunk_id == chunk_id), file_chunks[0] if file_chunks else None)
            if chosen is not None:
                chunks.append(chosen)
        return chunks


def _root_of(doc_ids: list[str], repo_root: Path | None) -> str:
    if repo_root is not None:
        return repo_root.resolve().as_posix()
    if not doc_ids:
        return ""
    return os.path.commonpath([os.path.dirname(d) for d in doc_ids]) if all(d.startswith("/") for d in doc_ids) else ""


def _relative(doc_id: str, root: str) -> str:
    if root and doc_id.startswith(root.rstrip("/") + "/"):
        return doc_id[len(root.rstrip("/")) + 1 :]
    return doc_id


def _chunk_at(chunks: list[Chunk], line: int | None) -> Chunk | None:
    if line is None:
        return None
    holding = [c for c in chunks if c.line_start is not None and c.line_start <= line <= (c.line_end or c.line_start)]
    return min(holding, key=lambda c: (c.line_end or 0) - (c.line_start or 0), default=None)


def _excerpt(text: str) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:EXCERPT_LINES]) + ("\n..." if len(lines) > EXCERPT_LINES else "")
