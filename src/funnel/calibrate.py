"""Per-index calibration: does the second stage help on *this* corpus, and how much say should it get?

A reranker trained on a few domains can hurt on others (measured: five unseen collections, all worse under
`replace`). So before the reranker reorders anything, funnel measures it on the corpus itself, with queries
made from the documents and no human judgments:

1. Make test queries from sampled chunks: a title or section heading (answer: the text under it), or one
   sentence (answer: the rest of its passage and the chunks beside it; the inverse cloze task). The query is
   taken out of its answer, so neither retriever can win by matching it verbatim.
2. Copy what competes for those queries in the real index (each query's BM25 and dense top-n, with their
   stored vectors) plus the edited answers into a small temporary embedded index, and run the real first
   stage (BM25 + dense + RRF, same window and per-document cap) on it.
3. Score each window with the reranker once; apply every option (first-stage order, rrf with reranker
   weights 0.25/0.5/1/2, guaranteed slots, replace) and take the reciprocal rank of the answer.
4. Adopt the best option only if it beats the first-stage order by MIN_GAIN with a paired randomization test
   p < MAX_P. The test knows the option was the best of six: each round flips the same queries' signs for
   every option and keeps the largest standardised change (max-T), so picking the luckiest of six is not
   mistaken for a real gain.
5. Otherwise the reranker reorders only the queries it is sure of (GATED: rrf:1, when its best score leads
   its second by 0.2), unless that too is shown to hurt here (a drop of MIN_GAIN with p < MAX_P) or never
   moved an answer; then the first-stage order is kept and the reranker is not run at all.

Queries made from the documents are a different relation from what people ask (a reranker trained on real
questions can look worse on them than it is), so a user who has real queries with known answers can
calibrate on those instead (`funnel calibrate --judged FILE`, `read_judged`): the same options and rule, on
the real index itself (nothing is taken out of the answers). They are stored with the calibration, so the
recalibration after an ingest measures them again.

The result is stored with the index (`Store.write_calibration`) and read by `Pipeline.search` under the
`auto` policy. It names the reranker and embedder it was measured with, so a different model is noticed.
"""

from __future__ import annotations

import json
import random
from collections import Counter
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from funnel.analyze import CJK_LETTERS, SENTENCE_END
from funnel.embed.base import Embedder
from funnel.errors import BackendUnavailable, ConfigError, StoreError
from funnel.index.base import Store
from funnel.rerank.base import Reranker
from funnel.rerank.policies import RerankPolicy, Rrf, ordered
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval, fuse, retrieve
from funnel.types import Chunk

if TYPE_CHECKING:
    from funnel.pipeline import SearchConfig

FORMAT = 1
DEFAULT_QUERIES = 120
# The first stage is chosen on a larger sample of its own: it needs no reranker, so queries are cheap, and
# its options differ by less (on a Korean manual set, BM25 alone against the hybrid: p=0.50 on 96 queries,
# p=0.009 on 194; BENCHMARKS.md "Korean").
FIRST_STAGE_QUERIES = 300
MIN_QUERIES = 20  # below this a corpus is too small to say anything; the safe choice stays
MIN_GAIN = 0.005  # MRR@10 the reranker must add before it is trusted
MAX_P = 0.05  # ... with this paired-test significance
RR_DEPTH = 10
MAX_JUDGED = 5000  # judged queries in one calibration (each is a search and a rerank)
GENERATED, JUDGED = "generated", "judged"

# A real word: 3+ letters, or 2+ Hangul/CJK characters (a Korean or Chinese word is often two syllables).
_WORD = re.compile(f"[^\\W\\d_{CJK_LETTERS}]{{3,}}|[{CJK_LETTERS}]{{2,}}")
_FILE_NAME = re.compile(r"[\w.-]+\.[A-Za-z0-9]{1,5}")


@dataclass(frozen=True)
class Option:
    """One way to combine the reranker with the first stage."""

    name: str
    policy: RerankPolicy
    weight: float = 1.0
    gate: float = 0.0  # under rrf: the lead of the reranker's best score over its second it needs to reorder


FIRST_STAGE = Option("first_stage", RerankPolicy.NONE, 0.0)
OPTIONS = (
    FIRST_STAGE,
    Option("rrf:0.25", RerankPolicy.RRF, 0.25),
    Option("rrf:0.5", RerankPolicy.RRF, 0.5),
    Option("rrf:1", RerankPolicy.RRF, 1.0),
    Option("rrf:2", RerankPolicy.RRF, 2.0),
    Option("guaranteed_slots", RerankPolicy.GUARANTEED_SLOTS),
    Option("replace", RerankPolicy.REPLACE),
)
# When no option is shown to help, the reranker still reorders the queries it is sure of: rrf with weight 1,
# gated on a 0.2 lead of its best score over its second (chosen on dev splits with a reranker that never saw
# them; on seven test sets it was never below the first stage by more than 0.004 nDCG@10, BENCHMARKS.md "A
# gate on the score gap"). It is kept unless the corpus shows that it hurts.
GATED = Option("rrf:1|gate:0.2", RerankPolicy.RRF, 1.0, 0.2)
MEASURED = (*OPTIONS, GATED)


@dataclass(frozen=True)
class FirstStageOption:
    """One weighting of BM25 and dense in the first stage's RRF (0: that retriever is not used)."""

    name: str
    bm25_weight: float
    dense_weight: float


# The fixed 1:1 fusion loses where one retriever is blind (an English embedder on Korean: dense 0.39 against
# BM25 0.97 on klue-nli-ko) or weak (BM25 on code, CoSQA): the calibration measures the alternatives too.
HYBRID = FirstStageOption("hybrid", 1.0, 1.0)
FIRST_STAGES = (
    HYBRID,
    FirstStageOption("bm25", 1.0, 0.0),
    FirstStageOption("dense", 0.0, 1.0),
    FirstStageOption("hybrid:bm25x2", 2.0, 1.0),
    FirstStageOption("hybrid:densex2", 1.0, 2.0),
)


@dataclass(frozen=True)
class Calibration:
    """What the second stage does on one index, and the measurements behind the choice."""

    policy: RerankPolicy  # NONE: first-stage order, the reranker is not run
    weight: float  # the reranker's weight under rrf
    reason: str
    reranker: str
    embedder: str
    index_version: int
    index_chunks: int
    queries: int = 0
    mrr: dict[str, float] = field(default_factory=dict)  # option -> MRR@10 of the answers (queries taken out of them)
    mrr_by_kind: dict[str, dict[str, float]] = field(default_factory=dict)  # query kind -> option -> MRR@10
    window_recall: float = 0.0  # share of queries whose answer the first-stage window held at all
    p_value: float | None = None
    seconds: float = 0.0
    created: str = ""
    source: str = GENERATED  # where the queries came from: GENERATED from the documents, or JUDGED by a person
    judged: list[dict] = field(default_factory=list)  # the judged queries ({query, relevant}), measured again later
    gate: float = 0.0  # under rrf: the lead of its best score over its second the reranker needs to reorder
    # The first stage chosen the same way (FIRST_STAGES): its option, weights and why; mrr of each option.
    first_stage: str = "hybrid"
    bm25_weight: float = 1.0
    dense_weight: float = 1.0
    first_stage_reason: str = ""
    first_stage_mrr: dict[str, float] = field(default_factory=dict)
    languages: dict[str, float] = field(default_factory=dict)  # share of the measured chunks per language
    format: int = FORMAT

    def first_stage_config(self, config: FirstStageConfig) -> FirstStageConfig:
        """`config` with the chosen first stage: its weights, and one retriever alone when the other got 0."""
        mode = (Retrieval.BM25 if not self.dense_weight
                else Retrieval.DENSE if not self.bm25_weight else Retrieval.HYBRID)
        return replace(config, retrieval=mode, bm25_weight=self.bm25_weight or 1.0,
                       dense_weight=self.dense_weight or 1.0)

    @property
    def option(self) -> str:
        if self.policy is RerankPolicy.RRF:
            return Rrf(weight=self.weight, gate=self.gate).label
        return "first_stage" if self.policy is RerankPolicy.NONE else self.policy.value

    def to_json(self) -> dict:
        data = asdict(self)
        data["policy"] = self.policy.value
        return data

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise StoreError("the stored calibration has an unknown format; run `funnel calibrate`")
        try:
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            fields["policy"] = RerankPolicy.parse(fields["policy"])
            return cls(**fields)
        except (KeyError, TypeError, ConfigError) as e:
            raise StoreError(f"the stored calibration is damaged ({e}); run `funnel calibrate`") from None

    def mismatch(self, reranker: str, embedder: str) -> str | None:
        """Why this calibration does not apply to a search with these models, or None when it does."""
        if self.reranker != reranker:
            return f"calibrated with reranker {self.reranker}, not {reranker}"
        if self.embedder != embedder:
            return f"calibrated with embedder {self.embedder}, not {embedder}"
        return None


@dataclass(frozen=True)
class PseudoQuery:
    text: str
    kind: str  # "title": a title or heading -> its text; "sentence": a sentence -> the rest of its chunk
    relevant: frozenset[str]  # chunk ids that answer it
    edits: tuple[Chunk, ...]  # chunks whose text changes in the small copy (the query taken out of them)


def _content(chunk: Chunk) -> str:
    """The chunk's text without the context line the chunker put first ("title > heading")."""
    first, sep, rest = chunk.text.partition("\n")
    return rest if sep and first.strip() == chunk.context_line.strip() else chunk.text


def _units(text: str) -> list[str]:
    """Sentences, and lines that are not sentences (table rows, code, list items)."""
    units = []
    for line in text.splitlines():
        units.extend(s.strip() for s in SENTENCE_END.split(line) if s.strip())
    return units


def _informative(text: str | None) -> bool:
    """A title or heading a person might have typed as a query: 3+ real words, not a file name."""
    if not text or _FILE_NAME.fullmatch(text.strip()):
        return False
    return len(_WORD.findall(text)) >= 3 and len(text.split()) <= 30


def _neighbours(chunks: list[Chunk], target: Chunk) -> frozenset[str]:
    """The target and the chunks beside it: the passage a reader would accept (chunks overlap)."""
    return frozenset(c.chunk_id for c in chunks if abs(c.ordinal - target.ordinal) <= 1)


def sentence_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """One sentence of the chunk as the query, and the chunk without it as the target (the inverse cloze
    task); None if the chunk has no sentence of 5-40 words with 3 real words, or too little would be left."""
    content = _content(chunk)
    usable = [u for u in _units(content) if 5 <= len(u.split()) <= 40 and len(_WORD.findall(u)) >= 3]
    if not usable:
        return None
    sentence = rng.choice(usable)
    rest = content.replace(sentence, " ", 1)
    if len(rest.split()) < 12:
        return None
    head = chunk.text[: len(chunk.text) - len(content)]
    return PseudoQuery(sentence, "sentence", _neighbours(chunks, chunk), (replace(chunk, text=head + rest),))


def title_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """The chunk's section heading (else its document's title) as the query, and the chunks under it as
    the answer, with that heading taken out of their context lines; None when it is not informative or
    the chunks would be left with too little text."""
    if _informative(chunk.heading):
        name, members = chunk.heading, [c for c in chunks if c.heading == chunk.heading]
    elif _informative(chunk.title):
        name, members = chunk.title, chunks
    else:
        return None
    edits = []
    for member in members:
        content = _content(member)
        if len(content.split()) >= 12:
            edits.append(replace(member, text=content.replace(name, " ")))
    if not edits:
        return None
    return PseudoQuery(name, "title", frozenset(e.chunk_id for e in edits), tuple(edits))


def half_query(chunks: list[Chunk], chunk: Chunk, rng: random.Random) -> PseudoQuery | None:
    """For a record of one sentence (a corpus of short records gives no sentence with a passage left
    around it): one half of its words as the query, the record without them as the target. None when the
    record has fewer than 8 words, or 3 real words on either side."""
    content = _content(chunk)
    words = content.split()
    if not 8 <= len(words) <= 80:
        return None
    cut = len(words) // 2
    first, second = " ".join(words[:cut]), " ".join(words[cut:])
    query, rest = (first, second) if rng.random() < 0.5 else (second, first)
    if len(_WORD.findall(query)) < 2 or len(_WORD.findall(rest)) < 2:
        return None
    head = chunk.text[: len(chunk.text) - len(content)]
    return PseudoQuery(query, "half", frozenset({chunk.chunk_id}), (replace(chunk, text=head + rest),))


MAKERS = {"title": title_query, "sentence": sentence_query, "half": half_query}


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
    """A file path as `funnel ingest` stores it (absolute), for a name given relative to the current folder."""
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


def _sample(
    store: Store, n_queries: int, rng: random.Random, kinds: tuple[str, ...]
) -> tuple[list[PseudoQuery], dict[str, Chunk]]:
    """Pseudo-queries spread over randomly chosen documents (several per document when there are few, as
    in one long PDF), and every chunk of the documents they came from."""
    doc_ids = sorted(store.document_hashes())  # ids only: lighter than the outline on a large index
    rng.shuffle(doc_ids)
    per_doc = max(1, -(-n_queries // max(1, len(doc_ids))))
    queries: list[PseudoQuery] = []
    seen: dict[str, Chunk] = {}
    edited: set[str] = set()
    for doc_id in doc_ids:
        if len(queries) >= n_queries:
            break
        chunks = store.get_chunks(doc_id)
        order = list(chunks)
        rng.shuffle(order)
        taken = 0
        for chunk in order:
            if taken == per_doc or len(queries) == n_queries:
                break
            first = len(queries) % len(kinds)  # the kinds take turns; a chunk that has no title gives a sentence
            query = next((q for kind in kinds[first:] + kinds[:first]
                          if (q := MAKERS[kind](chunks, chunk, rng)) is not None), None)
            if query is not None and not edited & {e.chunk_id for e in query.edits}:
                queries.append(query)
                edited |= {e.chunk_id for e in query.edits}
                taken += 1
        if taken:
            seen.update((c.chunk_id, c) for c in chunks)
    return queries, seen


def _small_copy(
    store: Store, embedder: Embedder, queries: list[PseudoQuery], sources: dict[str, Chunk], n: int,
    config: FirstStageConfig, path: str,
):
    """An embedded index of what competes for these queries in the real one: each query's BM25 and dense
    top-n from the real index, the chunks that answer it, with the query taken out of them (so neither
    retriever wins by matching it verbatim). Stored vectors are reused; only the edited chunks are embedded."""
    from funnel.index.lance import LanceStore  # the copy is always embedded, whatever the index is

    chunks: dict[str, Chunk] = {}
    for query in queries:
        lexical, dense = retrieve(store, embedder, query.text, n, config)
        chunks.update((s.chunk.chunk_id, s.chunk) for s in lexical + dense)
        chunks.update((cid, sources[cid]) for cid in query.relevant if cid in sources)
    edits = {e.chunk_id: e for q in queries for e in q.edits}
    plain = [cid for cid in chunks if cid not in edits]
    vectors = [np.asarray(embedder.embed([e.text for e in edits.values()]))]
    if plain:
        vectors.insert(0, store.vectors(plain))
    copy = LanceStore(path)
    with copy.transaction(embedder.name, embedder.dim, store.info().analyzer) as tx:
        tx.add([chunks[cid] for cid in plain] + list(edits.values()), np.concatenate(vectors))
    return copy


def _reciprocal_rank(order: list[str], relevant: frozenset[str]) -> float:
    for rank, chunk_id in enumerate(order[:RR_DEPTH], start=1):
        if chunk_id in relevant:
            return 1.0 / rank
    return 0.0


def _best_of_p(diffs: np.ndarray, best: int, rounds: int = 5000, seed: int = 0) -> float:
    """Two-sided paired randomization (sign-flip) p of column `best`'s mean change, where `diffs` holds one
    column per option (queries x options, each option's reciprocal rank minus the first stage's) and `best`
    was chosen for having the largest mean. Every round flips the same queries' signs in all columns and
    keeps the largest standardised |mean| of any column (max-T), so the p holds for the choice; each column is
    scaled by its root mean square (which a sign flip does not change), so an option that moves ranks a lot
    (replace) does not drown out one that moves them a little. With one column this is the plain paired test."""
    scale = np.sqrt((diffs**2).mean(axis=0))
    if scale[best] == 0.0 or diffs[:, best].mean() == 0.0:
        return 1.0
    columns = diffs[:, scale > 0] / scale[scale > 0]
    observed = abs(float(diffs[:, best].mean() / scale[best]))
    rng = np.random.default_rng(seed)
    at_least = 0
    for start in range(0, rounds, 500):  # blocks, so thousands of judged queries stay a few MB
        signs = rng.choice((-1.0, 1.0), size=(min(500, rounds - start), diffs.shape[0]))
        at_least += int(np.sum(np.abs(signs @ columns / diffs.shape[0]).max(axis=1) >= observed - 1e-12))
    return float((at_least + 1) / (rounds + 1))


def calibrate(
    store: Store,
    embedder: Embedder,
    reranker: Reranker | None,
    config: SearchConfig | None = None,
    *,
    n_queries: int = DEFAULT_QUERIES,
    seed: int = 0,
    kinds: tuple[str, ...] = ("title", "sentence"),
    judged: list[Judged] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Calibration:
    """Measure every option on pseudo-queries from this index, or on `judged` queries when given, and choose
    the first stage's weights and then the second stage's option (see the module docstring). Without a
    reranker only the first stage is chosen. `config` is the search's: its first stage, window and policy
    parameters. Reads the index, writes nothing: the caller stores the result."""
    from funnel.pipeline import SearchConfig  # the pipeline imports this module

    started = time.perf_counter()
    info = store.info()
    if info is None:
        raise StoreError("the index is empty: run `funnel ingest PATH` first")
    made = dict(
        reranker=reranker.name if reranker is not None else "none", embedder=embedder.name,
        index_version=info.version, index_chunks=info.chunks,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    config = config or SearchConfig()
    if judged:
        return _calibrate_judged(store, embedder, reranker, config, judged, made, started, progress)
    queries, sources = _generated(store, n_queries, seed, kinds)
    if len(queries) < MIN_QUERIES:
        return Calibration(
            RerankPolicy.NONE, 0.0,
            f"too small to calibrate: {len(queries)} test queries could be made from {info.chunks} chunks "
            f"(at least {MIN_QUERIES} needed); the first-stage order is kept",
            queries=len(queries), seconds=time.perf_counter() - started,
            languages=_languages(list(sources.values())), **made,
        )
    described = f"{len(queries)} test queries made from this corpus"
    wide = _generated(store, max(n_queries, FIRST_STAGE_QUERIES), seed, kinds)
    return _measure_and_decide(store, embedder, reranker, config, queries, sources, described, made, started,
                               progress, first_stage_sample=wide)


def _generated(
    store: Store, n_queries: int, seed: int, kinds: tuple[str, ...]
) -> tuple[list[PseudoQuery], dict[str, Chunk]]:
    """`_sample`'s queries, or halves of records where the corpus is of one-sentence records."""
    queries, sources = _sample(store, n_queries, random.Random(seed), kinds)
    if len(queries) < MIN_QUERIES:
        queries, sources = _sample(store, n_queries, random.Random(seed), ("half",))
    return queries, sources


def _calibrate_judged(
    store: Store, embedder: Embedder, reranker: Reranker | None, config: SearchConfig, judged: list[Judged],
    made: dict, started: float, progress: Callable[[int, int], None] | None,
) -> Calibration:
    """Every option on the judged queries that name a document of this index, over the index itself."""
    queries = judged_queries(store, judged)
    if len(queries) < MIN_QUERIES:
        raise ConfigError(
            f"only {len(queries)} of {len(judged)} judged queries name a document in this index (at least "
            f"{MIN_QUERIES} needed): check their ids or paths against `funnel search`, or calibrate with "
            "queries made from the documents (`funnel calibrate --generated`)"
        )
    unused = len(judged) - len(queries)
    described = f"{len(queries)} judged queries" + (f" ({unused} naming no document here left out)" if unused else "")
    result = _measure_and_decide(store, embedder, reranker, config, queries, None, described, made, started,
                                 progress)
    return replace(result, source=JUDGED, judged=[j.to_json() for j in judged])


def _measure_and_decide(
    store: Store, embedder: Embedder, reranker: Reranker | None, config: SearchConfig,
    queries: list[PseudoQuery], sources: dict[str, Chunk] | None, described: str, made: dict, started: float,
    progress: Callable[[int, int], None] | None,
    first_stage_sample: tuple[list[PseudoQuery], dict[str, Chunk]] | None = None,
) -> Calibration:
    """The first stage chosen from its options' reciprocal ranks (on `first_stage_sample` when given, else on
    `queries`), then the second stage's options measured over that first stage's windows for `queries`, each
    on a small copy of the index (the index itself when `sources` is None: judged queries edit nothing)."""
    fs = replace(config.first_stage, retrieval=Retrieval.HYBRID)
    n = max(fs.per_retriever, config.candidates)
    retrieved = _retrieved(store, embedder, queries, sources, n, fs)
    fs_queries, fs_retrieved = queries, retrieved
    if first_stage_sample is not None and len(first_stage_sample[0]) > len(queries):
        fs_queries = first_stage_sample[0]
        fs_retrieved = _retrieved(store, embedder, fs_queries, first_stage_sample[1], n, fs)
        described = f"{len(fs_queries)} test queries made from this corpus"
    fs_rr = {
        o.name: [_reciprocal_rank([c.chunk.chunk_id for c in fuse(*lists, config.candidates, _weighted(fs, o),
                                                                   config.chunks_per_document)], q.relevant)
                 for q, lists in zip(fs_queries, fs_retrieved)]
        for o in FIRST_STAGES
    }
    first, first_reason, _ = _choose_first_stage(fs_rr, described)
    described = described if fs_queries is queries else f"{len(queries)} test queries made from this corpus"
    chosen_fs = _weighted(fs, first)
    windows = [fuse(*lists, config.candidates, chosen_fs, config.chunks_per_document) for lists in retrieved]
    first_stage = dict(
        first_stage=first.name, bm25_weight=first.bm25_weight, dense_weight=first.dense_weight,
        first_stage_reason=first_reason, first_stage_mrr={k: float(np.mean(v)) for k, v in fs_rr.items()},
    )
    held = [any(c.chunk.chunk_id in q.relevant for c in w) for q, w in zip(queries, windows)]
    window_recall = float(np.mean(held))
    languages = _languages([s.chunk for lists in retrieved for ranked in lists for s in ranked])
    if reranker is None:
        return Calibration(RerankPolicy.NONE, 0.0, "no reranker configured", queries=len(queries),
                           window_recall=window_recall, seconds=time.perf_counter() - started,
                           languages=languages, **first_stage, **made)
    rr = _second_stage_rr(reranker, config, queries, windows, progress)
    result = _decide(rr, queries, window_recall, described, started, made)
    main = next(iter(languages), None)
    if result.policy is RerankPolicy.NONE and main not in (None, "en"):
        reason = (f"{result.reason}; this index is mostly {main} ({languages[main]:.0%} of the chunks measured) "
                  "and the reranker may read English only: a multilingual reranker can be calibrated instead")
        result = replace(result, reason=reason)
    return replace(result, languages=languages, **first_stage)


def _languages(chunks: list[Chunk]) -> dict[str, float]:
    """The share of distinct chunks per detected language (`funnel.analyze.detect`), most common first."""
    unique = {c.chunk_id: c.language for c in chunks if c.kind != "code" and c.language}
    counts = Counter(unique.values())
    total = sum(counts.values())
    return {lang: round(n / total, 3) for lang, n in counts.most_common(5)} if total else {}


def _retrieved(
    store: Store, embedder: Embedder, queries: list[PseudoQuery], sources: dict[str, Chunk] | None, n: int,
    fs: FirstStageConfig,
) -> list[tuple[list, list]]:
    """Each query's BM25 and dense top-n on a small copy of the index (the index when `sources` is None)."""
    with tempfile.TemporaryDirectory(prefix="funnel-calibrate-") as tmp:
        copy = store if sources is None else _small_copy(store, embedder, queries, sources, n, fs, tmp)
        return [retrieve(copy, embedder, q.text, n, fs) for q in queries]


def _weighted(config: FirstStageConfig, option: FirstStageOption) -> FirstStageConfig:
    return replace(config, bm25_weight=option.bm25_weight, dense_weight=option.dense_weight)


def _choose_first_stage(
    rr: dict[str, list[float]], described: str
) -> tuple[FirstStageOption, str, float | None]:
    """The first stage adopted: an option other than the 1:1 hybrid only when it beats it by MIN_GAIN with
    p < MAX_P under the same max-T paired test as the second stage's options."""
    mrr = {name: float(np.mean(values)) for name, values in rr.items()}
    base = mrr[HYBRID.name]
    best = max(FIRST_STAGES, key=lambda o: (round(mrr[o.name], 6), o is HYBRID))
    if best is HYBRID:
        return HYBRID, f"no weighting beat the 1:1 hybrid's MRR@10 {base:.3f} on {described}", None
    others = [o for o in FIRST_STAGES if o is not HYBRID]
    diffs = np.stack([np.asarray(rr[o.name]) - np.asarray(rr[HYBRID.name]) for o in others], axis=1)
    p = _best_of_p(diffs, others.index(best))
    measured = f"{best.name} {mrr[best.name]:.3f} vs hybrid {base:.3f} MRR@10 on {described}, p={p:.3f}"
    if mrr[best.name] - base >= MIN_GAIN and p < MAX_P:
        return best, measured, p
    return HYBRID, f"1:1 hybrid kept (best: {measured})", p


def _decide(
    rr: dict[str, list[float]], queries: list[PseudoQuery], window_recall: float, described: str, started: float,
    made: dict,
) -> Calibration:
    mrr = {name: float(np.mean(values)) for name, values in rr.items()}
    kinds_of = [q.kind for q in queries]
    mrr_by_kind = {
        kind: {name: float(np.mean([v for v, k in zip(values, kinds_of) if k == kind])) for name, values in rr.items()}
        for kind in sorted(set(kinds_of))
    }
    chosen, reason, p = _choose(rr, mrr, described)
    return Calibration(
        chosen.policy, chosen.weight, reason, gate=chosen.gate, queries=len(queries), mrr=mrr,
        mrr_by_kind=mrr_by_kind, window_recall=window_recall, p_value=p, seconds=time.perf_counter() - started,
        **made,
    )


def _second_stage_rr(
    reranker: Reranker, config: SearchConfig, queries: list[PseudoQuery], windows: list[list],
    progress: Callable[[int, int], None] | None,
) -> dict[str, list[float]]:
    """Each second-stage option's reciprocal rank per query, over the chosen first stage's windows."""
    policies = {o.name: config.policy_of(o.policy, o.weight, o.gate) for o in MEASURED}
    rr: dict[str, list[float]] = {option.name: [] for option in MEASURED}
    for done, (query, window) in enumerate(zip(queries, windows), start=1):
        try:
            scored = window[: config.rerank_depth]
            scores = list(reranker.rerank(query.text, scored).scores) if scored else []
        except Exception as e:  # a server down or a broken model: nothing is stored, the old choice stays
            raise BackendUnavailable(f"calibration stopped: {reranker.name} failed ({type(e).__name__}: "
                                     f"{str(e)[:200]}); the previous calibration is kept") from e
        if len(scores) != len(scored) or not all(np.isfinite(scores)):
            raise BackendUnavailable(f"calibration stopped: {reranker.name} returned {len(scores)} scores "
                                     f"for {len(scored)} candidates or a non-finite one; the previous "
                                     "calibration is kept")
        for name, policy in policies.items():
            hits = ordered(policy, window, scores)
            rr[name].append(_reciprocal_rank([h.chunk.chunk_id for h in hits], query.relevant))
        if progress:
            progress(done, len(queries))
    return rr


def _choose(rr: dict[str, list[float]], mrr: dict[str, float], described: str) -> tuple[Option, str, float | None]:
    """The option adopted, why (`described`: the queries, e.g. "120 test queries made from this corpus"), and
    the paired test's p (None when the first stage was best)."""
    first = mrr[FIRST_STAGE.name]
    best = max(OPTIONS, key=lambda o: (round(mrr[o.name], 6), o is FIRST_STAGE))
    others = [o for o in OPTIONS if o is not FIRST_STAGE]
    diffs = np.stack([np.asarray(rr[o.name]) - np.asarray(rr[FIRST_STAGE.name]) for o in others], axis=1)
    p = _best_of_p(diffs, others.index(best)) if best is not FIRST_STAGE else None
    if best is not FIRST_STAGE and mrr[best.name] - first >= MIN_GAIN and p is not None and p < MAX_P:
        return best, (f"{best.name} raised MRR@10 on {described} from "
                      f"{first:.3f} to {mrr[best.name]:.3f} (p={p:.3f})"), p
    if best is FIRST_STAGE:
        measured = f"no option beat the first-stage order's MRR@10 {first:.3f}"
    else:
        measured = f"best: {best.name} {mrr[best.name]:.3f} vs first stage {first:.3f}, p={p:.3f}"
    gated = mrr[GATED.name]
    change = np.asarray(rr[GATED.name]) - np.asarray(rr[FIRST_STAGE.name])
    if not change.any():  # never sure enough to move an answer: running it would cost time for nothing
        return FIRST_STAGE, (f"the reranker did not help on {described} ({measured}) and was never sure "
                             f"enough to move an answer under {GATED.name}; the first-stage order is kept"), p
    hurt = _best_of_p(change[:, None], 0)
    if first - gated >= MIN_GAIN and hurt < MAX_P:
        return FIRST_STAGE, (f"the reranker did not help on {described} ({measured}), and even where it was "
                             f"sure it hurt ({GATED.name}: {gated:.3f}, p={hurt:.3f}); the first-stage order "
                             "is kept"), p
    return GATED, (f"the reranker did not help on {described} ({measured}); it reorders only the queries "
                   f"where it is sure of one candidate ({GATED.name}: MRR@10 {gated:.3f}, not shown to "
                   "hurt)"), p
