"""Whether the documents hold an answer at all: the evidence a search found for a question, and the gate that
turns an answer without support into an abstention ("your documents do not answer this"), listing the closest
passages as closest, not an answer.

The evidence is what funnel already measures, no extra model:
- `coverage`: the share of the question's terms the best passage holds, each term weighted by how rare it is
  among the candidates, and a term no candidate holds weighted as the rarest (a name the index has never seen:
  "Project Heron");
- `absent`: the weighted share of the question's terms that no chunk of the whole index holds (a BM25 lookup
  per term);
- `similarity`: the embedder's cosine between the question and the best passage, when the dense retriever
  scored it and the embedder reads the question's script;
- `agreement`: whether BM25 and the dense retriever both put the top passage near their top.

`Evidence.score` folds them into one number in [0, 1]; the threshold it is held to is set per index by the
calibration (`funnel.calibrate.abstain`) from queries made from the index's documents (answerable) and
questions about other matters (unanswerable). An uncalibrated index uses DEFAULT_THRESHOLD.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from funnel.analyze import has_cjk
from funnel.errors import ConfigError
from funnel.generate.extractive import question_terms
from funnel.index.base import Store
from funnel.types import Answer, Citation, DocumentHit, Hit, RerankStatus, SearchResult

# Measured on the development sets (samples/eval, bench/data/formats, bench/data/korean-docs; BENCHMARKS.md
# "Abstention"): the evidence below which an uncalibrated index abstains.
DEFAULT_THRESHOLD = 0.35
# Without a similarity (a Korean question under an English embedder) the evidence is the terms' coverage alone,
# which runs lower for the same support (Korean development set: answerable questions from 0.21, against 0.23
# and up in English), so the threshold is scaled down: 0.35 x 0.55 = 0.19 abstains on none of its 40
# answerable questions and on 2 of its 5 unanswerable ones (BENCHMARKS.md, "Abstention").
NO_SIMILARITY_SCALE = 0.55
PASSAGES = 5  # the best passages whose evidence counts: the answer is built from these
NEAR_TOP = 5  # "near the top" of a retriever, for agreement
ABSTAINED = "abstained"
NOT_IN_DOCUMENTS = "Your documents do not answer this question."
CLOSEST = "Closest passages, not an answer:"
# Words that frame a question rather than name its matter: a corpus that never says "many" still answers
# "how many employees ...".
_FRAME = frozenset("many much mean means meaning kind kinds type types way ways get gets need needs use used "
                   "happen happens make makes called name named tell show give list long big".split()
                   # Korean question words and endings the morpheme analyzer keeps as terms
                   + "누구 언제 얼마 어디 무엇 뭐 어떻게 왜 어느 몇 나요 어야 는지 습니까 니까 인가요 까요 세요 "
                     "은가요 는가 ㄴ가요 있나요 되나요 하나요".split())


def _content_terms(text: str, analyzer=None) -> set[str]:
    """The question's terms that name its matter: no frame words, no single letters ("fund's" -> "s") and no
    single syllables (a Korean verb stem or ending: 받, 타, 내)."""
    return {t for t in question_terms(text, analyzer) if t not in _FRAME and (len(t) > 1 or t.isdigit())}


@dataclass(frozen=True)
class Evidence:
    """How well the search's best passages support an answer to the question."""

    score: float  # in [0, 1]; below the index's threshold the answer abstains
    coverage: float  # weighted share of the question's terms in the best passage
    absent: float  # weighted share of the question's terms found nowhere in the index
    similarity: float | None  # cosine of question and best passage (None: not scored, or another script)
    agreement: bool  # BM25 and dense both rank the best passage near their top
    gap: float  # weighted share of the heaviest question term the best passage lacks (0: it lacks none)
    terms: int  # content terms of the question
    threshold: float = 0.0  # what `score` is held to on this index (0: never abstain)

    @property
    def supported(self) -> bool:
        return self.score >= self.threshold

    def describe(self) -> str:
        similarity = "n/a" if self.similarity is None else f"{self.similarity:.2f}"
        return (f"evidence {self.score:.2f} of {self.threshold:.2f} needed (coverage {self.coverage:.2f}, absent {self.absent:.2f}, "
                f"similarity {similarity}, agreement {'yes' if self.agreement else 'no'})")


def _passages(result: SearchResult) -> list[Hit]:
    """The passages an answer is built from: each document's hits, best documents first."""
    hits = [hit for document in result.documents for hit in document.hits]
    return hits[:PASSAGES] if hits else list(result.hits[:PASSAGES])


def _weights(terms: set[str], pool: list[set[str]]) -> dict[str, float]:
    """A term's weight: its rarity among the candidates (IDF over the pool); a term no candidate holds
    weighs as much as one in a single candidate would, plus one."""
    n = len(pool)
    return {t: float(np.log(1.0 + n / (1 + sum(t in p for p in pool)))) for t in terms}


def _absent(terms: set[str], store: Store | None) -> set[str]:
    """The terms no chunk of the index holds (one BM25 lookup each; a store that cannot say: none)."""
    if store is None:
        return set()
    missing = set()
    for term in terms:
        try:
            if not store.search_lexical(term, 1):
                missing.add(term)
        except Exception:  # noqa: BLE001 - a lookup that fails is no evidence either way
            return set()
    return missing


def _agreement(hit: Hit) -> bool:
    c = hit.candidate
    return (c.bm25_rank is not None and c.bm25_rank <= NEAR_TOP
            and c.dense_rank is not None and c.dense_rank <= NEAR_TOP)


def measure(question: str, result: SearchResult, store: Store | None = None, threshold: float = 0.0) -> Evidence:
    """The evidence `result` holds for `question`, to be held to `threshold`."""
    # The index's own analysis of a question (an index holding no Hangul analyzes it without Kiwi).
    query_analyzer = getattr(store, "query_analyzer", None)
    terms = _content_terms(question, query_analyzer() if query_analyzer is not None else None)
    passages = _passages(result)
    if not terms or not passages:
        # No passage: nothing supports an answer. No content term ("?", "why?"): the question names nothing a
        # passage could support, so no passage does.
        return Evidence(0.0, 0.0, 0.0, None, False, 0.0, len(terms), threshold)
    pool = [question_terms(h.chunk.text) for h in result.hits] or [question_terms(h.chunk.text) for h in passages]
    weights = _weights(terms, pool)
    total = sum(weights.values()) or 1.0
    held = [question_terms(h.chunk.text) for h in passages]
    shares = [sum(weights[t] for t in terms & p) / total for p in held]
    best = int(np.argmax(shares))
    missing = _absent(terms, store)
    absent = sum(weights[t] for t in missing) / total
    top = passages[best]
    cjk = has_cjk(question)
    similarity = None if cjk else top.candidate.dense_score
    lacking = terms - held[best]
    gap = max((weights[t] for t in lacking), default=0.0) / total
    score = combine(shares[best], absent, similarity, _agreement(passages[0]))
    if similarity is None:
        threshold *= NO_SIMILARITY_SCALE
    return Evidence(score, shares[best], absent, similarity, _agreement(passages[0]), gap, len(terms), threshold)


def combine(coverage: float, absent: float, similarity: float | None, agreement: bool) -> float:
    """One number in [0, 1] from the four signals."""
    score = coverage - 0.5 * absent
    if similarity is not None:
        score = 0.6 * score + 0.4 * float(np.clip(similarity, 0.0, 1.0))
    if agreement:
        score += 0.1
    return float(np.clip(score, 0.0, 1.0))


def threshold(setting: str, calibrated: float | None) -> float | None:
    """The evidence an answer needs under the `[answer] abstain` setting: `auto` (the index's calibrated
    threshold, else DEFAULT_THRESHOLD), `off` (None: never abstain) or a number in [0, 1]."""
    if setting == "off":
        return None
    if setting == "auto":
        return DEFAULT_THRESHOLD if calibrated is None else calibrated
    return float(setting)


def check_setting(value: str) -> str:
    """`value` if it is a valid `[answer] abstain` setting, else ConfigError in one line."""
    if value in ("auto", "off"):
        return value
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise ConfigError(f"answer.abstain must be auto, off or a number from 0 to 1, got {value!r:.40}")
    return value


def abstention(answer: Answer, evidence: Evidence) -> Answer:
    """`answer` turned into an abstention: the text says the documents do not answer, and lists the closest
    passages (one citation each) under CLOSEST; flagged ABSTAINED."""
    result = answer.search
    citations: list[Citation] = []
    lines = [NOT_IN_DOCUMENTS, CLOSEST]
    for hit in (_passages(result) if result is not None else [])[:3]:
        if any(c.chunk_id == hit.chunk.chunk_id for c in citations):
            continue
        number = len(citations) + 1
        citations.append(Citation.of(number, hit.chunk, _first_lines(hit)))
        lines.append(f"- {hit.chunk.title} ({hit.chunk.location}) [{number}]")
    if not citations:
        lines = [NOT_IN_DOCUMENTS]
    flags = tuple(dict.fromkeys((*answer.flags, ABSTAINED)))
    return replace(answer, text="\n".join(lines), citations=tuple(citations), flags=flags, abstained=True,
                   evidence=evidence.score, quote=())


def gated(answer: Answer, evidence: Evidence) -> Answer:
    """An answer the gate let through, with its evidence; an LLM that said the documents do not answer
    (the prompt gives it NOT_IN_DOCUMENTS to say) abstained too."""
    if NOT_IN_DOCUMENTS.lower().rstrip(".") in answer.text.lower()[: 2 * len(NOT_IN_DOCUMENTS)]:
        return abstention(answer, evidence)
    return replace(answer, evidence=evidence.score)


class Abstainer:
    """The generator that abstains: what `Pipeline.answer` uses when the evidence falls short, so a
    streaming answer abstains the same way (one delta)."""

    name = "abstained"

    def __init__(self, evidence: Evidence, generator: str):
        self.evidence = evidence
        self.generator = generator

    def answer(self, question: str, result: SearchResult) -> Answer:
        return abstention(Answer(question, "", (), self.generator, result), self.evidence)


def relevant_documents(question: str, documents: list[DocumentHit], cutoff: float) -> list[DocumentHit]:
    """`documents` less those whose own evidence (their passages alone, against each other) is below
    `cutoff`: fewer than k documents when the rest do not hold the question's matter."""
    def score(document: DocumentHit) -> float:
        alone = SearchResult(question, (document,), document.hits, RerankStatus.SKIPPED)
        return measure(question, alone).score

    return [d for d in documents if score(d) >= cutoff]


def cut_note(left_out: int, cutoff: float) -> tuple[str, ...]:
    return (f"{left_out} document(s) below the relevance cut-off {cutoff:g} left out",) if left_out else ()


def _first_lines(hit: Hit, chars: int = 300) -> str:
    lines = hit.chunk.text.splitlines()
    if hit.chunk.context_line and lines and lines[0].strip() == hit.chunk.context_line:
        lines = lines[1:]
    text = " ".join(line.strip() for line in lines if line.strip())
    return text[:chars] + ("…" if len(text) > chars else "")
