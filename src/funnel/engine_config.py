"""The engine's configuration: one frozen dataclass per part, each default written once, here or in the
part's own module (`FirstStageConfig` in `funnel.retrieve.first_stage`, `PolicyParams` in
`funnel.rerank.policies`). A field's metadata holds its range and description: the settings
(`funnel.apps.settings`, sections of funnel.toml) are generated from these, and `Pipeline.build(config)`
is the one way to make a pipeline from them.

    EngineConfig
      first_stage: FirstStageConfig   [search]  how candidates are retrieved and fused
      grouping:    GroupingConfig     [search]  k documents, the window, chunks per document
      rerank:      RerankConfig       [rerank]  the second stage's backend, policy and its parameters
      ingest:      IngestConfig       [ingest]  chunk size, analyzer, file limits
      llm:         LlmConfig          [llm]     the answer's LLM (none: the extractive answer)
      answer:      AnswerConfig       [answer]  when an answer says the documents do not hold one
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from funnel import analyze, embed, generate, rerank
from funnel.generate import abstain
from funnel.config import check_ranges, setting
from funnel.errors import ConfigError
from funnel.generate.base import ANSWER_TOKENS, CONTEXT_TOKENS, CONTEXT_WINDOW, LLM_TIMEOUT_S
from funnel.generate.step import BORDERLINE
from funnel.ingest.walk import FileLimits
from funnel.rerank.policies import RERANK_DEPTH, RERANK_TIMEOUT_S, PolicyParams, RerankPolicy
from funnel.retrieve.first_stage import FirstStageConfig


@dataclass(frozen=True)
class GroupingConfig:
    k: int = setting(5, "documents returned", ge=1, le=1000)
    candidates: int = setting(25, "chunks the first stage hands to the second (the window)", ge=1, le=1000)
    chunks_per_document: int = setting(3, "chunks one document may hold in the window and in a result", ge=1,
                                       le=1000)
    cutoff: float | None = setting(None, "relevance cut-off: documents whose evidence (the abstention's "
                                         "measure, 0-1) is below it are left out, so fewer than k come back "
                                         "(default: none, always k)", ge=0, le=1)

    def __post_init__(self):
        check_ranges(self)


@dataclass(frozen=True)
class RerankConfig(PolicyParams):
    """The second stage: which reranker, under which policy (`PolicyParams`: each policy's parameters), over
    how much of the window, within how long."""

    backend: str = setting("builtin", f"second-stage backend: {rerank.REGISTRY.help()}")
    model: str | None = setting(None, "model name sent to an HTTP rerank API")
    api_key: str | None = setting(None, "bearer token for an HTTP rerank API", secret=True)
    max_tokens: int | None = setting(
        None, "longest (query, passage) pair an ONNX or sentence-transformers cross-encoder scores, in "
              "tokens (default: ONNX 192 or the model's own when shorter, sentence-transformers 256); the "
              "passage is cut to fit", ge=16, le=512)
    policy: RerankPolicy = setting(RerankPolicy.AUTO, f"how the reranker's scores and the first-stage order "
                                                      f"combine: {RerankPolicy.help()} (auto: the index's "
                                                      "calibration decides)")
    depth: int | None = setting(RERANK_DEPTH, "the window's top chunks the reranker scores; the rest keep "
                                              "first-stage order below them", ge=1, le=1000)
    timeout_s: float | None = setting(RERANK_TIMEOUT_S, "bound on one reranking call, in seconds", gt=0)

    def __post_init__(self):
        if self.depth is not None and self.depth < 1:
            raise ConfigError(f"rerank depth must be at least 1, got {self.depth}")
        super().__post_init__()  # each policy checks its own parameters first, in its own words
        check_ranges(self)


@dataclass(frozen=True)
class IngestConfig:
    chunk_tokens: int | None = setting(None, "chunk size in embedder tokens (default: the embedder's window)",
                                       ge=16)
    analyzer: str = setting(analyze.AUTO, "BM25 analysis of a new index (`funnel.analyze`): auto "
                                          "(korean with Kiwi, else cjk), english, cjk, korean; an existing "
                                          "index keeps its own")
    max_file_mb: float = setting(FileLimits.max_bytes / 1e6, "larger text, Markdown and code files are "
                                                              "skipped", gt=0)
    max_pdf_mb: float = setting(FileLimits.max_pdf_bytes / 1e6, "larger PDFs are skipped", gt=0)

    def __post_init__(self):
        check_ranges(self)
        if self.analyzer not in analyze.names():
            raise ConfigError(f"analyzer must be one of {', '.join(analyze.names())}, got {self.analyzer!r}")

    @property
    def limits(self) -> FileLimits:
        return FileLimits.from_mb(self.max_file_mb, self.max_pdf_mb)


@dataclass(frozen=True)
class LlmConfig:
    backend: str = setting("none", f"LLM for answers and triage: {generate.REGISTRY.help()}")
    model: str | None = setting(None, "model name sent to the LLM server")
    api_key: str | None = setting(None, "bearer token for an OpenAI-compatible server", secret=True)
    completion: bool = setting(False, "base model without a chat template: use /v1/completions")
    timeout_s: float = setting(LLM_TIMEOUT_S, "bound on one LLM call, in seconds", gt=0)
    context_tokens: int = setting(CONTEXT_TOKENS, "passages sent to the LLM, in tokens (approx.)", ge=100)
    answer_tokens: int = setting(ANSWER_TOKENS, "longest LLM answer, in tokens", ge=8)
    mode: str = setting("auto", "how the LLM answers: reader (reads the best passages' answer windows; each sentence "
                                "is checked against them, the sentence picker stands in when it refuses), passages "
                                "(the top passages up to context_tokens), auto (reader for local models)")
    threads: int | None = setting(None, "local: llama.cpp threads (default: all cores)", ge=1)
    context_window: int = setting(CONTEXT_WINDOW, "local: llama.cpp context window, prompt and answer, in tokens",
                                  ge=512)

    def __post_init__(self):
        check_ranges(self)
        if self.mode not in LLM_MODES:
            raise ConfigError(f"llm mode must be one of {', '.join(LLM_MODES)}, got {self.mode!r}")

    @property
    def reads(self) -> bool:
        """Whether the LLM answers as the reader (`funnel.generate.reader`)."""
        return self.mode == "reader" or (self.mode == "auto" and self.backend.strip().startswith("local"))


LLM_MODES = ("auto", "reader", "passages")


@dataclass(frozen=True)
class AnswerConfig:
    abstain: str = setting("auto", "when the evidence does not support an answer, say so and list the closest "
                                   "passages: auto (the index's calibrated threshold, else "
                                   f"{abstain.DEFAULT_THRESHOLD}), off, or a threshold from 0 to 1")
    borderline: float = setting(BORDERLINE, "with a reader (llm mode reader): evidence from this share of the "
                                            "threshold up to it goes to the reader, which answers or abstains "
                                            "(1: the gate alone decides)", ge=0, le=1)

    def __post_init__(self):
        object.__setattr__(self, "abstain", abstain.check_setting(str(self.abstain)))
        check_ranges(self)


@dataclass(frozen=True)
class EngineConfig:
    """Everything a pipeline is built from. `index`, `embedder` and `threads` name the backends; the
    sections say how each stage runs."""

    index: str = setting(".funnel", "index directory or postgresql:// URL")
    embedder: str | None = setting(None, f"{embed.REGISTRY.help()} (default: the index's, else minilm)")
    threads: int | None = setting(None, "inference threads (default: all cores)", ge=1)
    first_stage: FirstStageConfig = field(default_factory=FirstStageConfig)
    grouping: GroupingConfig = field(default_factory=GroupingConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)

    @classmethod
    def of(cls, first_stage: FirstStageConfig | None = None, **flat: Any) -> EngineConfig:
        """A config from the flat names `funnel.open(**search_config)` and the older `SearchConfig` took
        (`k`, `candidates`, `chunks_per_document`, `policy`, `guaranteed`, `rerank_weight`, `rerank_rrf_k`,
        `rerank_gate`, `rerank_depth`, `rerank_timeout_s`, plus `index`, `embedder`, `threads`)."""
        parts: dict[str, dict[str, Any]] = {"grouping": {}, "rerank": {}, "top": {}}
        for name, value in flat.items():
            section, key = FLAT_NAMES.get(name, (None, name))
            if section is None:
                valid = ", ".join(sorted(FLAT_NAMES))
                raise ConfigError(f"unknown search setting {name!r}; valid: {valid}")
            if section == "rerank" and key == "policy":
                value = RerankPolicy.parse(value)
            parts[section][key] = value
        return cls(**parts["top"], first_stage=first_stage or FirstStageConfig(),
                   grouping=GroupingConfig(**parts["grouping"]), rerank=RerankConfig(**parts["rerank"]))

    def with_rerank(self, **changes: Any) -> EngineConfig:
        return replace(self, rerank=replace(self.rerank, **changes))


# The older flat names (funnel.open's keywords) -> (part, field).
FLAT_NAMES: dict[str, tuple[str, str]] = {
    **{f.name: ("grouping", f.name) for f in fields(GroupingConfig)},
    **{f.name: ("rerank", f.name) for f in fields(PolicyParams)},
    "policy": ("rerank", "policy"),
    "rerank_depth": ("rerank", "depth"),
    "rerank_timeout_s": ("rerank", "timeout_s"),
    **{name: ("top", name) for name in ("index", "embedder", "threads")},
}
