"""Settings, read once at the edge: flags > FUNNEL_* environment > funnel.toml > defaults."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import get_type_hints

from pydantic import Field, SecretStr, ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from funnel import analyze, embed, generate, rerank
from funnel.errors import ConfigError
from funnel.rerank.policies import RERANK_DEPTH, PolicyParams, RerankPolicy
from funnel.retrieve.first_stage import FirstStageConfig, Retrieval


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FUNNEL_", extra="forbid", toml_file="funnel.toml")

    # A string, not a Path: a postgresql:// URL must keep its double slash.
    index: str = Field(".funnel", description="index directory or postgresql:// URL")
    embedder: str | None = Field(
        None, description=f"{embed.REGISTRY.help()} (default: the index's, else minilm)"
    )
    threads: int | None = Field(None, ge=1, description="inference threads (default: all cores)")
    k: int = Field(5, ge=1, le=1000, description="documents returned")
    candidates: int = Field(25, ge=1, le=1000, description="chunks handed to the second stage")
    rerank_depth: int = Field(
        RERANK_DEPTH, ge=1, le=1000,
        description="the window's top chunks the reranker scores; the rest keep first-stage order below them",
    )
    rerank_max_tokens: int | None = Field(
        None, ge=16, le=512,
        description="longest (query, passage) pair an ONNX or sentence-transformers cross-encoder scores, in "
                    "tokens (default: ONNX 192 or the model's own when shorter, sentence-transformers 256); the "
                    "passage is cut to fit",
    )
    # The core dataclasses hold the defaults; a setting names one and checks its range.
    per_retriever: int = Field(
        FirstStageConfig.per_retriever, ge=1, le=10000, description="top-N from each of dense and BM25"
    )
    retrieval: Retrieval = FirstStageConfig.retrieval
    rrf_k: float = Field(FirstStageConfig.rrf_k, gt=0, description="the first stage's RRF k (BM25 + dense)")
    bm25_weight: float = Field(FirstStageConfig.bm25_weight, ge=0)
    dense_weight: float = Field(FirstStageConfig.dense_weight, ge=0)
    reranker: str = Field(
        "builtin",
        description=f"second-stage backend: {rerank.REGISTRY.help()}",
    )
    rerank_model: str | None = Field(None, description="model name sent to an HTTP rerank API")
    rerank_api_key: SecretStr | None = Field(None, description="bearer token for an HTTP rerank API")
    policy: RerankPolicy = Field(
        RerankPolicy.AUTO, description="auto (the index's calibration) | none | replace | guaranteed_slots | rrf"
    )
    # ... and one setting per policy parameter, made from `PolicyParams` below the class.
    rerank_timeout_s: float = Field(30.0, gt=0)
    max_tokens: int | None = Field(None, ge=16, description="chunk size in embedder tokens")
    analyzer: str = Field(
        analyze.AUTO,
        description=f"ingest: BM25 analysis of a new index: {' | '.join(analyze.names())} (auto: korean with "
                    "Kiwi, else cjk; an existing index keeps its own)"
    )
    max_file_mb: float = Field(2.0, gt=0, description="ingest: larger text, Markdown and code files are skipped")
    max_pdf_mb: float = Field(100.0, gt=0, description="ingest: larger PDFs are skipped")
    llm: str = Field("none", description=f"LLM for answers and triage: {generate.REGISTRY.help()}")
    llm_model: str | None = Field(None, description="model name sent to the LLM server")
    llm_api_key: SecretStr | None = Field(None, description="bearer token for an OpenAI-compatible server")
    llm_completion: bool = Field(False, description="base model without a chat template: use /v1/completions")
    llm_timeout_s: float = Field(60.0, gt=0)
    llm_context_tokens: int = Field(3000, ge=100, description="passages sent to the LLM, in tokens (approx.)")
    llm_answer_tokens: int = Field(512, ge=8, description="longest LLM answer, in tokens")
    repo: Path | None = Field(None, description="triage: the repository root (read_file is confined to it)")
    slack_webhook_url: SecretStr | None = Field(None, description="triage: Slack incoming-webhook URL")
    slack_timeout_s: float = Field(10.0, gt=0, description="triage: bound on each attempt to post to Slack")
    slack_retries: int = Field(4, ge=0, le=10, description="triage: retries after a failed post (429, 5xx, down)")
    incidents: Path = Field(Path(".funnel-incidents.sqlite"), description="triage: the incident database")
    data_dir: Path = Field(Path(".funnel-data"), description="serve: collections (indexes + uploaded files)")
    database: SecretStr | None = Field(
        None, description="serve/worker: keep all service state in this PostgreSQL (postgresql://...), shared "
                          "by every process; unset: embedded under data_dir"
    )
    search_database: SecretStr | None = Field(
        None, description="serve: a streaming read replica of `database` where searches read the collection "
                          "indexes (everything else stays on `database`)"
    )
    job_threads: int = Field(
        2, ge=0, le=64, description="serve: threads running ingest and calibration jobs (0: `funnel worker` does)"
    )
    job_lease_s: float = Field(
        30.0, ge=1, le=3600, description="serve/worker: a job whose process stops renewing it is taken again after this"
    )
    max_upload_mb: int = Field(50, ge=1, le=10_000, description="serve: largest upload request, in MiB")
    api_key: SecretStr | None = Field(
        None, description="serve: required as X-API-Key or Authorization: Bearer on /v1/*, /api/*, /metrics"
    )
    cors_origins: list[str] = Field(
        default_factory=list, description='serve: origins allowed by CORS, e.g. ["http://localhost:5173"]'
    )

    @field_validator("database", "search_database")
    @classmethod
    def _database_url(cls, value):
        if value is not None and value.get_secret_value().split("://", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("analyzer")
    @classmethod
    def _analyzer(cls, value: str) -> str:
        if value not in analyze.names():
            raise ValueError(f"must be one of {', '.join(analyze.names())}")
        return value

    @field_validator("index", mode="before")
    @classmethod
    def _index_text(cls, value):
        return str(value) if isinstance(value, Path) else value  # open_store mends a URL a Path folded

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        named = os.environ.get("FUNNEL_CONFIG")
        if named and not Path(named).is_file():
            raise ConfigError(f"FUNNEL_CONFIG names {named}, which is not a file")
        toml = TomlConfigSettingsSource(settings_cls, toml_file=named or "funnel.toml")
        return (init_settings, env_settings, toml)


def _policy_settings() -> dict:
    """One setting per `PolicyParams` field: its name, type, default and range come from the core, so a new
    policy parameter is added in `funnel/rerank/policies.py` alone."""
    types = get_type_hints(PolicyParams)
    return {f.name: (types[f.name], Field(f.default, **f.metadata)) for f in fields(PolicyParams)}


Settings = create_model("Settings", __base__=_Settings, __module__=__name__, **_policy_settings())
Settings.__doc__ = "funnel's settings: flags > FUNNEL_* environment > funnel.toml > defaults."


def load_settings(**overrides) -> Settings:
    """Settings with CLI flags applied; any invalid value becomes one ConfigError line."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        where = where if where.isprintable() else repr(where)  # a TOML key may hold a newline
        raise ConfigError(" ".join(f"invalid setting {where}: {first['msg']}".split())) from None
    except (OSError, ValueError, RecursionError) as e:  # unreadable or malformed funnel.toml
        source = os.environ.get("FUNNEL_CONFIG") or "funnel.toml"
        raise ConfigError(" ".join(f"cannot read settings from {source}: {e}".split())) from None
