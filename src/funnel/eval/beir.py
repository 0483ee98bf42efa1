"""BEIR-layout datasets: corpus.jsonl, queries*.jsonl, qrels/<name>.tsv (graded judgments allowed).

Handles the variants found in ../shared/datasets: a split in a sub-folder with its own corpus
(tatqa/test/), qrels named by split (scifact/qrels/test.tsv) or by level (tatqa/test/qrels/chunk.tsv,
document.tsv), and records that name a parent document in `metadata.doc_id` (grouping for
document-level judgments).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from funnel.errors import ConfigError
from funnel.types import Document, LoadedDocument, Section, SectionKind


@dataclass(frozen=True)
class EvalSet:
    """Queries and judgments at one level, plus how records map to documents."""

    name: str
    split: str
    # What the judgments name: "record" (a corpus record, e.g. a SciFact abstract), "chunk" (a record
    # that is part of a larger document, TAT-QA) or "document" (the parent, or a file of a question set).
    level: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    parents: dict[str, str] = field(default_factory=dict)  # record id -> document id (document level)
    skipped: dict[str, int] = field(default_factory=dict)  # what was left out, and how much
    answers: dict[str, list[str]] = field(default_factory=dict)  # strings an answer must contain
    by_path: bool = False  # judged units are file paths (a question set), matched as path suffixes
    pages: dict[str, dict[str, int]] = field(default_factory=dict)  # qid -> judged pages ("file.pdf#p23")
    abstain: frozenset[str] = frozenset()  # questions no document answers (`expect: abstain`)


def json_line(line: str, path: Path, number: int):
    """One line of a JSONL file, parsed; any way it is not JSON is a ConfigError at file:line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{number}: not JSON ({e.msg})") from None
    except RecursionError:
        raise ConfigError(f"{path}:{number}: not JSON (nested too deeply)") from None
    except ValueError as e:  # an integer of more than 4300 digits
        raise ConfigError(f"{path}:{number}: not JSON ({str(e).split(';')[0]})") from None


def _jsonl(path: Path) -> Iterator[dict]:
    """Records that carry an `_id` (corpus and queries files); anything else is a ConfigError at file:line."""
    with open(path, "rb") as fh:  # bytes, decoded per line: a bad byte is reported at its own line
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ConfigError(f"{path}:{number}: not UTF-8 text ({e.reason})") from None
            if line.strip():
                record = json_line(line, path, number)
                if not isinstance(record, dict) or "_id" not in record:
                    raise ConfigError(f"{path}:{number}: expected a JSON object with an '_id'")
                if ("\\ud" in line or "\\uD" in line) and not _is_text(record):
                    raise ConfigError(f"{path}:{number}: a \\u escape of a lone surrogate is not text")
                yield record


def _is_text(record: dict) -> bool:
    """False when a string holds a lone surrogate ("\\ud800" escaped in the JSON): it cannot be encoded,
    hashed or stored. A pair ("\\ud83d\\ude00", an emoji) decodes to one character and is fine."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text_field(record: dict, key: str, path: Path) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(
            f"{path}: record {str(record['_id'])!r:.60}: {key!r} is {type(value).__name__}, not text"
        )
    return value


def _metadata(record: dict, path: Path) -> dict:
    value = record.get("metadata")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: record {str(record['_id'])!r:.60}: 'metadata' is {type(value).__name__}, "
                          "not an object")
    return value


def split_dir(root: Path, split: str) -> Path:
    """The folder holding corpus.jsonl for this split: root/split/ when it exists, else root."""
    if (root / split / "corpus.jsonl").is_file():
        return root / split
    if (root / "corpus.jsonl").is_file():
        return root
    splits = sorted(p.parent.name for p in root.glob("*/corpus.jsonl"))
    if splits:
        raise ConfigError(f"{root}: no split {split!r}; found: {', '.join(splits)}")
    raise ConfigError(f"{root}: no corpus.jsonl (expected the BEIR layout, optionally per split)")


def corpus_size(folder: Path) -> int:
    with open(folder / "corpus.jsonl", "rb") as fh:
        return sum(1 for line in fh if line.strip())


def _section(text: str, metadata: dict) -> Section:
    kind = SectionKind.PROSE
    if metadata.get("kind") == "table":
        kind = SectionKind.TABLE  # rows are whole lines: never split a row
    elif text.lstrip().startswith(("def ", "async def ", "class ")):
        kind = SectionKind.CODE
    return Section(text=text, kind=kind)


def load_corpus(folder: Path, keep: set[str] | None = None) -> Iterator[LoadedDocument]:
    """Each record as a document (doc_id = record id); its title goes on every chunk as context."""
    path = folder / "corpus.jsonl"
    for record in _jsonl(path):
        doc_id = str(record["_id"])
        if keep is not None and doc_id not in keep:
            continue
        title = _text_field(record, "title", path).strip()
        text = _text_field(record, "text", path).strip() or title
        if not text:
            continue
        section = _section(text, _metadata(record, path))
        digest = hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()
        kind = "code" if section.kind is SectionKind.CODE else "record"
        yield LoadedDocument(
            Document(doc_id=doc_id, path=doc_id, title=title, kind=kind, content_hash=digest), (section,)
        )


def parents(folder: Path) -> dict[str, str]:
    """record id -> metadata.doc_id, for corpora whose records are parts of larger documents."""
    out = {}
    path = folder / "corpus.jsonl"
    for record in _jsonl(path):
        parent = _metadata(record, path).get("doc_id")
        if parent:
            out[str(record["_id"])] = str(parent)
    return out


def _qrels_file(root: Path, folder: Path, split: str, level: str) -> tuple[Path, str]:
    """The judgments to use and the level they are at."""
    options = []
    if level in ("auto", "chunk"):
        options.append((folder / "qrels" / "chunk.tsv", "chunk"))
    if level in ("auto", "record"):  # a split folder may hold a whole BEIR set, qrels/<split>.tsv included
        options.append((folder / "qrels" / f"{split}.tsv", "record"))
        options.append((root / "qrels" / f"{split}.tsv", "record"))
    if level in ("auto", "document"):
        options.append((folder / "qrels" / "document.tsv", "document"))
    for path, found_level in options:
        if path.is_file():
            return path, found_level
    available = sorted({p.name for p in [*folder.glob("qrels/*.tsv"), *root.glob("qrels/*.tsv")]})
    raise ConfigError(
        f"{root}: no judgments for split {split!r} at level {level!r}; found: {', '.join(available) or 'none'}"
    )


def _queries_file(root: Path, folder: Path, split: str) -> Path:
    for candidate in (folder / f"queries_{split}.jsonl", root / f"queries_{split}.jsonl", folder / "queries.jsonl"):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{root}: no queries file for split {split!r}")


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """A qrels TSV (query-id, corpus-id, score): query -> corpus id -> grade."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            if not reader.fieldnames or not {"query-id", "corpus-id", "score"} <= set(reader.fieldnames):
                raise ConfigError(f"{path}: expected a header query-id, corpus-id, score")
            for row in reader:
                try:
                    qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"{path}:{reader.line_num}: expected query-id, corpus-id and an integer score"
                    ) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:  # a field over csv's size limit (an unclosed quote swallows the rest)
        raise ConfigError(f"{path}: not a readable TSV file ({e})") from None
    return qrels


def load_beir(root: Path, split: str = "test", level: str = "auto") -> EvalSet:
    """Judged queries of one split. Judged ids missing from the corpus or queries are counted, not used."""
    if level not in ("auto", "record", "chunk", "document"):
        raise ConfigError(f"unknown level {level!r}; valid: auto, record, chunk, document")
    folder = split_dir(root, split)
    path, found_level = _qrels_file(root, folder, split, level)
    qrels = _read_qrels(path)
    record_parents = parents(folder) if found_level == "document" else {}
    known = set(record_parents.values()) if record_parents else {
        str(r["_id"]) for r in _jsonl(folder / "corpus.jsonl")
    }
    skipped: dict[str, int] = {}
    for qid in list(qrels):
        judged = {d: s for d, s in qrels[qid].items() if d in known}
        missing = len(qrels[qid]) - len(judged)
        if missing:
            skipped["judgments naming ids not in the corpus"] = skipped.get(
                "judgments naming ids not in the corpus", 0) + missing
        if any(s > 0 for s in judged.values()):
            qrels[qid] = judged
        else:
            del qrels[qid]
            skipped["queries with no relevant judged document"] = skipped.get(
                "queries with no relevant judged document", 0) + 1

    texts = {str(q["_id"]): q.get("text") for q in _jsonl(_queries_file(root, folder, split))}
    queries = {
        qid: texts[qid].strip() for qid in qrels if isinstance(texts.get(qid), str) and texts[qid].strip()
    }
    missing = sum(1 for qid in qrels if qid not in texts)
    if missing:
        skipped["judged queries missing from the queries file"] = missing
    if len(qrels) - missing > len(queries):
        skipped["judged queries without text"] = len(qrels) - missing - len(queries)
    unjudged = sum(1 for q in texts if q not in qrels)
    if unjudged and folder != root:  # a per-split queries file: every query should be judged
        skipped["queries without judgments"] = unjudged
    if not queries:
        raise ConfigError(f"{root}: no judged queries left for split {split!r} ({skipped})")
    return EvalSet(
        name=root.name,
        split=split,
        level=found_level,
        queries=queries,
        qrels={q: qrels[q] for q in queries},
        parents=record_parents,
        skipped=skipped,
    )
