"""From `--dataset PATH` to an indexed corpus and an EvalSet: BEIR folders or question-set files."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from funnel.errors import ConfigError
from funnel.eval import beir
from funnel.eval.beir import EvalSet
from funnel.eval.questions import load_questions
from funnel.indexer import IngestReport
from funnel.pipeline import Pipeline

QUESTION_FILES = (".yaml", ".yml", ".jsonl")


@dataclass(frozen=True)
class Suite:
    evalset: EvalSet
    corpus: Path | None = None  # BEIR folder holding corpus.jsonl
    documents: tuple[Path, ...] = ()  # question sets: files and folders to ingest
    keep: frozenset[str] | None = None  # BEIR: only these records (a corpus sample)

    @property
    def cache_key(self) -> str:
        """Name + a hash of where the corpus is (and which sample): two sets never share an index.
        Keyed by corpus, not split, so SciFact's and CoSQA's splits share one index."""
        sources = [str(self.corpus.resolve())] if self.corpus is not None else sorted(
            str(d.resolve()) for d in self.documents)
        if self.keep is not None:
            sources += sorted(self.keep)
        digest = hashlib.sha256("\n".join(sources).encode()).hexdigest()[:10]
        name = self.evalset.name if self.corpus is None or self.corpus.name == self.evalset.name else (
            f"{self.evalset.name}-{self.corpus.name}")
        return f"{name}-{digest}"


def open_suite(
    path: Path,
    split: str = "test",
    level: str = "auto",
    limit: int | None = None,
    corpus_sample: int | None = None,
    documents: list[Path] | None = None,
) -> Suite:
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}")
    if corpus_sample is not None and corpus_sample < 0:
        raise ConfigError(f"--corpus-sample must be 0 or more, got {corpus_sample}")
    if path.is_file():
        if path.suffix not in QUESTION_FILES:
            raise ConfigError(f"{path}: a question set must be .yaml, .yml or .jsonl")
        qs = load_questions(path, documents)
        return Suite(_limited(qs.evalset, limit), documents=qs.documents)
    evalset = _limited(beir.load_beir(path, split, level), limit)
    folder = beir.split_dir(path, split)
    keep = None
    if corpus_sample is not None:
        judged = set(_judged_records(evalset))
        keep = set(judged)
        for record in beir.load_corpus(folder):
            if len(keep) >= len(judged) + corpus_sample:
                break
            keep.add(record.document.doc_id)
        keep = frozenset(keep)
    return Suite(evalset, corpus=folder, keep=keep)


def _limited(evalset: EvalSet, limit: int | None) -> EvalSet:
    if not limit:
        return evalset
    queries = dict(list(evalset.queries.items())[:limit])
    return replace(
        evalset, queries=queries, qrels={q: evalset.qrels[q] for q in queries},
        pages={q: p for q, p in evalset.pages.items() if q in queries},
        answers={q: a for q, a in evalset.answers.items() if q in queries},
    )


def _judged_records(evalset: EvalSet) -> list[str]:
    units = {u for rel in evalset.qrels.values() for u in rel}
    if evalset.level == "document":
        return [record for record, parent in evalset.parents.items() if parent in units]
    return sorted(units)


def default_index_dir(suite: Suite, embedder: str, cache: str | Path | None = None) -> Path:
    """The index `funnel eval` keeps for a suite and an embedder, under `cache` (the `eval.cache` setting;
    None: ~/.cache/funnel/eval)."""
    cache = Path(cache).expanduser() if cache else Path.home() / ".cache" / "funnel" / "eval"
    return cache / f"{suite.cache_key}-{embedder.replace('/', '_').replace(':', '_')}"


def build_index(pipeline: Pipeline, suite: Suite, progress=None) -> IngestReport:
    """Ingest the suite's corpus; unchanged records are skipped by content hash, so re-runs are fast."""
    if suite.corpus is not None:
        keep = set(suite.keep) if suite.keep is not None else None
        return pipeline.indexer.ingest_documents(beir.load_corpus(suite.corpus, keep), progress=progress)
    return pipeline.ingest(list(suite.documents), progress=progress)
