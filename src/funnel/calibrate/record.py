"""The calibration record: what the second stage (and the first) does on one index, the measurements behind
the choice, and its JSON as the store keeps it (`Store.write_calibration`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from funnel.errors import ConfigError, StoreError
from funnel.rerank.policies import PolicyChoice, RerankPolicy
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval

FORMAT = 1
GENERATED, JUDGED = "generated", "judged"


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
    # option -> MRR@10 of the answers (queries taken out of them)
    mrr: dict[str, float] = field(default_factory=dict)
    mrr_by_kind: dict[str, dict[str, float]] = field(default_factory=dict)  # query kind -> option -> MRR@10
    window_recall: float = 0.0  # share of queries whose answer the first-stage window held at all
    p_value: float | None = None
    seconds: float = 0.0
    created: str = ""
    # where the queries came from: GENERATED from the documents, or JUDGED by a person
    source: str = GENERATED
    # the judged queries ({query, relevant}), measured again later
    judged: list[dict] = field(default_factory=list)
    gate: float = 0.0  # under rrf: the lead of its best score over its second the reranker needs to reorder
    # The first stage chosen the same way (FIRST_STAGES): its option, weights and why; mrr of each option.
    first_stage: str = "hybrid"
    bm25_weight: float = FirstStageConfig.bm25_weight
    dense_weight: float = FirstStageConfig.dense_weight
    first_stage_reason: str = ""
    first_stage_mrr: dict[str, float] = field(default_factory=dict)
    languages: dict[str, float] = field(default_factory=dict)  # share of the measured chunks per language
    # The evidence an answer needs on this index (`funnel.calibrate.abstain`; None: made before it, the default)
    abstain_threshold: float | None = None
    abstain_reason: str = ""
    abstain_measured: dict[str, float] = field(default_factory=dict)
    format: int = FORMAT

    def first_stage_config(self, config: FirstStageConfig) -> FirstStageConfig:
        """`config` with the chosen first stage: its weights, and one retriever alone when the other got 0."""
        mode = (Retrieval.BM25 if not self.dense_weight
                else Retrieval.DENSE if not self.bm25_weight else Retrieval.HYBRID)
        return replace(config, retrieval=mode, bm25_weight=self.bm25_weight or 1.0,
                       dense_weight=self.dense_weight or 1.0)

    @property
    def option(self) -> str:
        rrf = self.policy is RerankPolicy.RRF
        return PolicyChoice(self.policy, self.weight if rrf else None, (self.gate or None) if rrf else None).label

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
