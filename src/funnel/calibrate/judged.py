"""Judged queries: real queries a person wrote, with the documents that answer them (`funnel calibrate
--judged FILE`). Queries made from the documents are a different relation from what people ask (a reranker
trained on real questions can look worse on them than it is); these are measured on the real index itself,
and stored with the calibration so a recalibration after an ingest measures them again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from funnel.calibrate.queries import PseudoQuery
from funnel.calibrate.record import JUDGED
from funnel.errors import ConfigError
from funnel.index.base import Store

MAX_JUDGED = 5000  # judged queries in one calibration (each is a search and a rerank)


@dataclass(frozen=True)
class Judged:
    """A real query and the documents that answer it, by id or path (as `funnel search` shows them; a relative
    path is also looked up from the current folder, as `funnel ingest` would have stored it)."""

    query: str
    relevant: tuple[str, ...]

    def to_json(self) -> dict:
        return {"query": self.query, "relevant": list(self.relevant)}


def parse_judged(item: object, where: str) -> Judged:
    """One judged query from `{"query": str, "relevant": [id or path, ...]}` (or one id); else a ConfigError
    saying `where`."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected an object with \"query\" and \"relevant\"")
    query, relevant = item.get("query"), item.get("relevant")
    if isinstance(relevant, str):
        relevant = [relevant]
    if not isinstance(query, str) or not query.strip():
        raise ConfigError(f"{where}: \"query\" must be a non-empty string")
    if not isinstance(relevant, list) or not relevant or not all(isinstance(r, str) and r for r in relevant):
        raise ConfigError(f"{where}: \"relevant\" must be a document id or path, or a non-empty list of them")
    return Judged(query.strip(), tuple(relevant))


def read_judged(path: str | Path) -> list[Judged]:
    """Judged queries from a JSON Lines file, one `{"query": ..., "relevant": [...]}` per line (blank lines
    skipped); a ConfigError naming the file and line otherwise."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read judged queries from {path}: {e.__class__.__name__}: "
                          f"{getattr(e, 'strerror', None) or e}") from None
    judged = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise ConfigError(f"{path}:{number}: not JSON ({e})") from None
        judged.append(parse_judged(item, f"{path}:{number}"))
        if len(judged) > MAX_JUDGED:
            raise ConfigError(f"{path}: more than {MAX_JUDGED} judged queries; use a sample of them")
    if not judged:
        raise ConfigError(f"{path}: no judged queries in it")
    return judged


def _resolved(name: str) -> str:
    """A file path as `funnel ingest` stores it (absolute), for a name given relative to the current
    folder."""
    try:
        return Path(name).expanduser().resolve().as_posix()
    except (OSError, RuntimeError, ValueError):
        return name


def judged_queries(store: Store, judged: list[Judged]) -> list[PseudoQuery]:
    """The judged queries that name a document in this index, as test queries whose answer is every chunk of
    those documents. Nothing is edited: a person wrote the query, so it cannot match its answer verbatim."""
    chunks_of: dict[str, set[str]] = {}
    for entry in store.outline():
        chunks_of.setdefault(entry.doc_id, set()).add(entry.chunk_id)
        if entry.path and entry.path != entry.doc_id:
            chunks_of.setdefault(entry.path, set()).add(entry.chunk_id)
    queries = []
    for j in judged:
        relevant = frozenset(
            c for name in j.relevant for c in chunks_of.get(name) or chunks_of.get(_resolved(name), ())
        )
        if relevant:
            queries.append(PseudoQuery(j.query, JUDGED, relevant, ()))
    return queries
