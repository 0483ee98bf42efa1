"""BEIR-layout datasets: corpus.jsonl, queries*.jsonl, qrels/<split>.tsv."""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from funnel.errors import ConfigError
from funnel.types import Document, LoadedDocument, Section


@dataclass(frozen=True)
class BeirSplit:
    name: str
    queries: dict[str, str]  # only queries that have judgments
    qrels: dict[str, dict[str, int]]
    skipped_queries: int  # judged ids missing from the queries file


def _jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}:{number}: not JSON ({e.msg})") from None


def corpus_size(root: Path) -> int:
    with open(root / "corpus.jsonl", encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def load_corpus(root: Path) -> Iterator[LoadedDocument]:
    """Each record as a document whose title is the record's title (chunks carry it as context)."""
    path = root / "corpus.jsonl"
    if not path.is_file():
        raise ConfigError(f"{root}: no corpus.jsonl (expected the BEIR layout)")
    for record in _jsonl(path):
        doc_id = str(record["_id"])
        title = (record.get("title") or "").strip()
        text = (record.get("text") or "").strip()
        digest = hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()
        yield LoadedDocument(
            Document(doc_id=doc_id, path=doc_id, title=title, kind="record", content_hash=digest),
            (Section(text=text or title),),
        )


def _queries_file(root: Path, split: str) -> Path:
    for name in (f"queries_{split}.jsonl", f"queries.{split}.jsonl", "queries.jsonl"):
        if (root / name).is_file():
            return root / name
    raise ConfigError(f"{root}: no queries file for split {split!r}")


def load_split(root: Path, split: str = "test") -> BeirSplit:
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        available = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise ConfigError(f"{root}: no qrels for split {split!r}; available: {', '.join(available) or 'none'}")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    all_queries = {str(q["_id"]): q["text"] for q in _jsonl(_queries_file(root, split))}
    queries = {qid: all_queries[qid] for qid in qrels if qid in all_queries}
    return BeirSplit(split, queries, {q: qrels[q] for q in queries}, len(qrels) - len(queries))
