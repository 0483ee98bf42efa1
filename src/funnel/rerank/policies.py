"""How reranker scores and the first-stage order combine into the final order — and the fallback.

- `none`: first-stage order.
- `replace`: reranker order.
- `guaranteed_slots`: the first-stage top-g documents keep their places at the top, and their chunks keep
  their first-stage order (so the passages an answer is built from are the ones the first stage chose);
  the reranker orders everything else (seed 001: a table row that hybrid ranks high survives a
  cross-encoder that scores it lowest).
- `auto`: whatever the index's calibration chose (`funnel.calibrate`); resolved by the pipeline into one of
  the others before any of them is applied.
- `rrf`: reciprocal-rank fusion of the first-stage rank and the reranker rank; the reranker's rank carries
  `weight` (1: equal say; 0: the first-stage order; the per-index calibration measures which weight a
  corpus earns).

On any reranker failure the result is the first-stage order, unchanged, with status FALLBACK and the
reason: the fallback never re-scores or re-fuses.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from funnel.config import Choice
from funnel.errors import ConfigError
from funnel.deadline import DeadlineExceeded, call_within
from funnel.rerank.base import Reranker
from funnel.retrieve.fusion import rrf
from funnel.types import Candidate, Hit, RerankResult, RerankStatus

log = logging.getLogger(__name__)

# The window's top chunks the reranker scores by default; the rest keep their first-stage order below them.
# 15 of the 25, with pairs cut to 192 tokens (onnx_cross_encoder.RERANK_MAX_TOKENS): half the rerank time,
# for 0.000-0.008 nDCG@10 on SciFact and CoSQA and 0.004-0.011 on TAT-QA (its table rows ranked 16-25); on four domains it never saw,
# the options that trust it most lose less (rrf:1 +0.035 on CACM) and the gentlest moves -0.023..+0.018 (n.s.)
# (BENCHMARKS.md, "Rerank depth and pair length").
RERANK_DEPTH = 15
# How long one reranking call may take before the first-stage order stands (status fallback).
RERANK_TIMEOUT_S = 30.0


class RerankPolicy(Choice):
    NONE = "none"
    REPLACE = "replace"
    GUARANTEED_SLOTS = "guaranteed_slots"
    RRF = "rrf"
    AUTO = "auto"


@dataclass(frozen=True)
class FirstStageOnly:
    """`none`: the first-stage order; the reranker is not run."""

    kind = RerankPolicy.NONE

    def order(self, candidates: list[Candidate], scores: list[float]) -> list[Hit]:
        return identity(candidates)


@dataclass(frozen=True)
class Replace:
    """`replace`: the reranker's order."""

    kind = RerankPolicy.REPLACE

    def order(self, candidates: list[Candidate], scores: list[float]) -> list[Hit]:
        by_score = _by_score(scores)
        return _hits(candidates, scores, by_score, {i: scores[i] for i in by_score})


@dataclass(frozen=True)
class GuaranteedSlots:
    """`guaranteed_slots`: the first-stage top-g documents keep their places (and their chunks' order);
    the reranker orders everything else."""

    g: int = 2
    kind = RerankPolicy.GUARANTEED_SLOTS

    def __post_init__(self):
        _not_negative("guaranteed slots", self.g)

    def order(self, candidates: list[Candidate], scores: list[float]) -> list[Hit]:
        kept = _first_stage_top_documents(candidates, self.g)
        order = sorted(kept) + [i for i in _by_score(scores) if i not in kept]
        return _hits(candidates, scores, order, {i: scores[i] for i in order}, kept)


@dataclass(frozen=True)
class Rrf:
    """`rrf`: reciprocal-rank fusion of the first-stage rank and the reranker rank, the reranker's rank
    carrying `weight`. With a `gate`, the reranker reorders a query only when its best score leads its
    second by at least `gate` (it is sure of one candidate); otherwise the first-stage order stands, its
    scores still shown."""

    k: float = 60.0
    weight: float = 1.0
    gate: float = 0.0
    kind = RerankPolicy.RRF

    def __post_init__(self):
        _not_negative("the reranker weight", self.weight)
        _not_negative("the rerank gate", self.gate)

    def order(self, candidates: list[Candidate], scores: list[float]) -> list[Hit]:
        if self.gate and len(scores) > 1 and not self.sure(scores):
            order = list(range(len(candidates)))
            return _hits(candidates, scores, order, {i: 1.0 / (self.k + i + 1) for i in order})
        fused = rrf([list(range(len(candidates))), _by_score(scores)], k=self.k, weights=[1.0, self.weight])
        return _hits(candidates, scores, [i for i, _ in fused], dict(fused))

    @property
    def label(self) -> str:
        """`rrf:W|gate:G` as calibrations, variants and results name it (`|gate` only when there is one)."""
        return PolicyChoice(RerankPolicy.RRF, self.weight, self.gate or None).label

    def sure(self, scores: list[float]) -> bool:
        """Whether the reranker's best score leads its second by the gate."""
        best, second = sorted(scores, reverse=True)[:2]
        return best - second >= self.gate


def _not_negative(what: str, value: float) -> None:
    if value < 0:
        raise ConfigError(f"{what} must be 0 or more, got {value}")


Policy = FirstStageOnly | Replace | GuaranteedSlots | Rrf


@dataclass(frozen=True)
class PolicyParams:
    """Every explicit policy's parameters, under the names settings give them (funnel.toml, FUNNEL_*, flags,
    `funnel.open(**search_config)`). `Settings` makes one setting of each field (default and range from
    here), and `SearchConfig` is these plus the rest: a policy and its parameters live in this file alone."""

    guaranteed: int = field(
        default=GuaranteedSlots.g, metadata={"ge": 0, "description": "first-stage documents a reranker may not displace"}
    )
    rerank_weight: float = field(
        default=Rrf.weight, metadata={"ge": 0, "description": "the reranker's weight under policy rrf"}
    )
    rerank_rrf_k: float = field(
        default=Rrf.k, metadata={"gt": 0, "description": "the RRF k of policy rrf (first stage + reranker)"}
    )
    rerank_gate: float = field(
        default=Rrf.gate,
        metadata={"ge": 0, "description": "under policy rrf, the lead the reranker's best score needs over its "
                                          "second before it reorders a query (0: always)"},
    )

    def __post_init__(self):
        for kind in (RerankPolicy.GUARANTEED_SLOTS, RerankPolicy.RRF):
            self.policy_of(kind)  # each policy checks its own parameters

    def policy_of(
        self, kind: RerankPolicy | str, weight: float | None = None, gate: float | None = None
    ) -> Policy:
        """The policy object `kind` names with these parameters (`weight` and `gate`: the reranker's under
        rrf, when a calibration or an eval variant sets its own)."""
        kind = RerankPolicy.parse(kind)
        if kind is RerankPolicy.AUTO:
            raise ValueError("the auto policy is resolved from the index's calibration before it is applied")
        if kind is RerankPolicy.GUARANTEED_SLOTS:
            return GuaranteedSlots(self.guaranteed)
        if kind is RerankPolicy.RRF:
            return Rrf(self.rerank_rrf_k, self.rerank_weight if weight is None else weight,
                       self.rerank_gate if gate is None else gate)
        return Replace() if kind is RerankPolicy.REPLACE else FirstStageOnly()


# What the calibration and results call the `none` policy: the first stage's order.
FIRST_STAGE_LABEL = "first_stage"


@dataclass(frozen=True)
class PolicyChoice:
    """A policy as one string names it, and the one parser of those strings: `none` (or `first_stage`),
    `replace`, `guaranteed_slots`, `rrf`, `rrf:W`, `rrf:W|gate:G`, `auto`. Settings, eval variants
    (`hybrid+rerank(rrf:0.5)`), the calibration's options, a result's `policy` label (`auto: rrf:1|gate:0.2`)
    and the API all read and write this form. `weight`/`gate` None: the configured `PolicyParams`' own."""

    kind: RerankPolicy
    weight: float | None = None
    gate: float | None = None

    def __post_init__(self):
        for what, value in (("weight", self.weight), ("gate", self.gate)):
            if self.kind is not RerankPolicy.RRF and value is not None:
                raise ConfigError(f"only rrf takes a {what}, e.g. rrf:0.5 or rrf:1|gate:0.2; "
                                  f"not {self.kind.value}")
        for what, value in (("the reranker weight", self.weight), ("the rerank gate", self.gate)):
            if value is not None:
                _not_negative(what, value)

    @classmethod
    def parse(cls, text: str | RerankPolicy | PolicyChoice) -> PolicyChoice:
        """`rrf:0.5|gate:0.2` -> PolicyChoice(RRF, 0.5, 0.2); a result's label `auto: X` -> X. ConfigError
        naming the valid forms for anything else."""
        if isinstance(text, PolicyChoice):
            return text
        if isinstance(text, RerankPolicy):
            return cls(text)
        text = text.strip().removeprefix("auto:").strip()
        head, bar, gated = text.partition("|")
        name, colon, weighted = head.partition(":")
        kind = RerankPolicy.NONE if name == FIRST_STAGE_LABEL else RerankPolicy.parse(name)
        if bar and not gated.startswith("gate:"):
            raise ConfigError(f"bad policy {text!r}; expected e.g. rrf:1|gate:0.2")
        weight = _number(weighted, text) if colon else None
        gate = _number(gated.removeprefix("gate:"), text) if bar else None
        return cls(kind, weight, gate)

    @property
    def label(self) -> str:
        """The string `parse` reads back: `rrf:1|gate:0.2`, `guaranteed_slots`, `first_stage` for none."""
        if self.kind is RerankPolicy.NONE:
            return FIRST_STAGE_LABEL
        if self.kind is not RerankPolicy.RRF or (self.weight is None and self.gate is None):
            return self.kind.value
        weight = 1.0 if self.weight is None else self.weight
        return f"rrf:{weight:g}" + (f"|gate:{self.gate:g}" if self.gate else "")

    def policy(self, params: PolicyParams) -> Policy:
        """The policy object, its parameters from `params` where this choice does not set them."""
        return params.policy_of(self.kind, self.weight, self.gate)

    @staticmethod
    def forms() -> str:
        """Every form for a help text, generated from `RerankPolicy`."""
        return f"{RerankPolicy.help()} (rrf takes rrf:WEIGHT and |gate:LEAD, e.g. rrf:1|gate:0.2)"


def _number(text: str, whole: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"bad policy {whole!r}: {text!r} is not a number") from None


@dataclass(frozen=True)
class SecondStageResult:
    hits: list[Hit]
    status: RerankStatus
    reason: str = ""
    truncated: tuple[int, ...] = ()


def second_stage(
    query: str,
    candidates: list[Candidate],
    reranker: Reranker | None,
    policy: Policy | RerankPolicy,
    timeout_s: float | None = RERANK_TIMEOUT_S,
    depth: int | None = None,
) -> SecondStageResult:
    """The reranker's scores under `policy`, or the first-stage order on any failure. A policy's name
    stands for its object with the default parameters. Only the first `depth` candidates are scored (None:
    all); the rest follow them in first-stage order (`ordered`)."""
    if isinstance(policy, RerankPolicy):
        policy = PolicyParams().policy_of(policy)
    if isinstance(policy, FirstStageOnly) or reranker is None or not candidates:
        reason = "policy none" if isinstance(policy, FirstStageOnly) else "no reranker configured"
        return SecondStageResult(identity(candidates), RerankStatus.SKIPPED, reason if candidates else "")
    if depth is not None and depth < 1:
        raise ConfigError(f"the rerank depth must be at least 1, got {depth}")
    scored = candidates[:depth]
    started = time.perf_counter()
    try:
        # On a daemon thread: a hung backend is abandoned after the timeout and never holds the exit.
        result = call_within(timeout_s, lambda: reranker.rerank(query, scored))
        scores = _validated(result, len(scored))
    except DeadlineExceeded:
        return _fallback(candidates, f"{reranker.name} timed out after {timeout_s:g}s")
    except Exception as e:  # any backend failure: keep the first stage, say why
        return _fallback(candidates, f"{reranker.name} failed: {type(e).__name__}: {e}")
    log.debug("rerank %d candidates in %.1f ms", len(scored), 1000 * (time.perf_counter() - started))
    return SecondStageResult(ordered(policy, candidates, scores), RerankStatus.OK, truncated=result.truncated)


def ordered(policy: Policy, candidates: list[Candidate], scores: list[float]) -> list[Hit]:
    """`policy`'s order of the scored head (the first len(scores) candidates), then the unscored rest in
    first-stage order: a rerank depth below the window only ever reorders the window's top."""
    head = policy.order(candidates[: len(scores)], scores)
    rest = candidates[len(scores) :]
    return head + [Hit(c, final_rank=len(head) + i, final_score=c.fused_score) for i, c in enumerate(rest, start=1)]


def identity(candidates: list[Candidate]) -> list[Hit]:
    """First-stage order, untouched."""
    return [Hit(c, final_rank=i, final_score=c.fused_score) for i, c in enumerate(candidates, start=1)]


def _fallback(candidates: list[Candidate], reason: str) -> SecondStageResult:
    log.warning("rerank fallback to first-stage order: %s", reason)
    return SecondStageResult(identity(candidates), RerankStatus.FALLBACK, reason)


def _validated(result: RerankResult, n: int) -> list[float]:
    if not isinstance(result, RerankResult):
        raise TypeError(f"reranker returned {type(result).__name__}, not RerankResult")
    if len(result.scores) != n:
        raise ValueError(f"{len(result.scores)} scores for {n} candidates")
    scores = [float(s) for s in result.scores]
    if any(math.isnan(s) or math.isinf(s) for s in scores):
        raise ValueError("non-finite score")
    return scores


def _by_score(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def _hits(
    candidates: list[Candidate], scores: list[float], order: list[int], final: dict[int, float],
    kept: set[int] = frozenset(),
) -> list[Hit]:
    rerank_rank = {i: r for r, i in enumerate(_by_score(scores), start=1)}
    return [
        Hit(
            candidates[i],
            final_rank=rank,
            final_score=final[i],
            rerank_score=scores[i],
            rerank_rank=rerank_rank[i],
            guaranteed=i in kept,
        )
        for rank, i in enumerate(order, start=1)
    ]


def _first_stage_top_documents(candidates: list[Candidate], g: int) -> set[int]:
    """Indices of every candidate chunk of the first g distinct documents (first-stage order).

    Guaranteeing only each document's best chunk is not enough: the answer is built from a document's
    top chunks, and a reranker that dislikes tables would still push a table row below that document's
    prose chunks (measured on samples/eval: 2 of 19 answers lost that way)."""
    documents: list[str] = []
    for c in candidates:
        if c.chunk.doc_id not in documents:
            if len(documents) == g:
                break
            documents.append(c.chunk.doc_id)
    top = set(documents)
    return {i for i, c in enumerate(candidates) if c.chunk.doc_id in top}
