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
      models:      ModelsConfig       [models]  where the models built on first use are kept

`ENGINE_SECTIONS` is that table; `FLAT_NAMES` (generated from it) gives every key its flat name, the one
`funnel.open(**search_config)`, `EngineConfig.of`, the CLI's flags and the integrations' keywords take.

The limits a request may ask for are the fields' ranges (`funnel.config.bounds`): `k`, `candidates` and the
rerank `depth` are 1-1000 wherever they are set (funnel.toml, FUNNEL_*, a flag, `funnel.open`). `k` alone
has a lower ceiling for one request over the network, `request_le=100` (`funnel.config.request_bounds`):
the HTTP API's and the MCP tools' `k`, because a served request's cost (a window of at least k chunks,
k documents' text in the answer) is the server's to bound, not the caller's to choose.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from funnel import analyze, embed, generate, rerank
from funnel.generate import abstain
from funnel.config import Choice, ModelsConfig, check_ranges, flat_names, section_fields, setting
from funnel.errors import ConfigError
from funnel.generate.base import ANSWER_TOKENS, CONTEXT_TOKENS, CONTEXT_WINDOW, LLM_TIMEOUT_S
from funnel.generate.step import BORDERLINE
from funnel.ingest.walk import FileLimits
from funnel.rerank.policies import RERANK_DEPTH, RERANK_TIMEOUT_S, PolicyParams, RerankPolicy
from funnel.retrieve.first_stage import FirstStageConfig


@dataclass(frozen=True)
class GroupingConfig:
    k: int = setting(5, "documents returned", ge=1, le=1000, request_le=100)
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
    models: ModelsConfig = field(default_factory=ModelsConfig)

    @classmethod
    def of(cls, first_stage: FirstStageConfig | None = None, **flat: Any) -> EngineConfig:
        """A config from flat names, as `funnel.open(**search_config)` takes them: `FLAT_NAMES` (`k`,
        `candidates`, `policy`, `guaranteed`, `rerank_weight`, `rerank_depth`, `llm_model`, ...) and `index`,
        `embedder`, `threads`. `first_stage` is the first stage's config the flat names change."""
        top, parts = {}, {}
        for name, value in flat.items():
            if name in TOP_LEVEL:
                top[name] = value
                continue
            if name not in FLAT_NAMES:
                valid = ", ".join(sorted([*FLAT_NAMES, *TOP_LEVEL]))
                raise ConfigError(f"unknown search setting {name!r}; valid: {valid}")
            part, field_name, kind = _PART_FIELDS[FLAT_NAMES[name]]
            if isinstance(kind, type) and issubclass(kind, Choice):
                value = kind.parse(value)
            parts.setdefault(part, {})[field_name] = value
        built = {part: dc(**parts.get(part, {})) for section in ENGINE_SECTIONS.values()
                 for part, dc in section.items() if part != "first_stage"}
        return cls(**top, **built, first_stage=replace(first_stage or FirstStageConfig(),
                                                       **parts.get("first_stage", {})))

    def with_rerank(self, **changes: Any) -> EngineConfig:
        return replace(self, rerank=replace(self.rerank, **changes))


# The engine's sections of the settings (funnel.toml's [search], FUNNEL_SEARCH__K, ...): section ->
# {EngineConfig's part: its dataclass}. `index`, `embedder` and `threads` are EngineConfig's own, at the top.
ENGINE_SECTIONS: dict[str, dict[str, type]] = {
    "search": {"first_stage": FirstStageConfig, "grouping": GroupingConfig},
    "rerank": {"rerank": RerankConfig},
    "llm": {"llm": LlmConfig},
    "answer": {"answer": AnswerConfig},
    "ingest": {"ingest": IngestConfig},
    "models": {"models": ModelsConfig},
}
TOP_LEVEL = ("index", "embedder", "threads")
# How a key's flat name is made (`funnel.config.flat_names`): the key itself, `rerank_`/`llm_` + the key in
# the sections whose keys alone are ambiguous (model, api_key, timeout_s), and these, the names earlier
# releases gave them.
FLAT_PREFIXED = ("rerank", "llm")
FLAT_IRREGULAR = {
    "reranker": "rerank.backend", "policy": "rerank.policy", "guaranteed": "rerank.guaranteed",
    "llm": "llm.backend", "max_tokens": "ingest.chunk_tokens",
    "model_dir": "models.minilm_dir", "e5_model_dir": "models.e5_dir",  # FUNNEL_MODEL_DIR, ..._E5_MODEL_DIR
}
# Flat name -> "section.key", generated: `rerank_weight` -> rerank.weight, `k` -> search.k, ...
FLAT_NAMES: dict[str, str] = flat_names({s: tuple(parts.values()) for s, parts in ENGINE_SECTIONS.items()},
                                        FLAT_PREFIXED, FLAT_IRREGULAR)
# "section.key" -> (EngineConfig's part, the field's name, its type).
_PART_FIELDS: dict[str, tuple[str, str, Any]] = {
    f"{section}.{key}": (part, f.name, kind)
    for section, parts in ENGINE_SECTIONS.items() for part, dc in parts.items()
    for key, f, kind in section_fields(section, (dc,))
}
