"""The settings' sections: the service's config dataclasses (the engine's are in `funnel.engine_config`), which
dataclasses make each section, every key's flat name, and the pydantic model of each section, generated from
the dataclasses' fields (default, range, description written once, there).

    index, embedder, threads                  (top level)
    [search]    FirstStageConfig + GroupingConfig
    [rerank]    RerankConfig
    [llm]       LlmConfig        [answer] AnswerConfig
    [ingest]    IngestConfig     [models] ModelsConfig
    [serve]     ServeConfig + LimitsConfig     [triage] TriageConfig
    [slack]     SlackConfig      [database] DatabaseConfig
    [eval]      EvalConfig
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, create_model

from funnel.apps.state.limits import LimitsConfig
from funnel.config import flat_names, section_fields, section_key, setting
from funnel.engine_config import ENGINE_SECTIONS, FLAT_IRREGULAR, FLAT_PREFIXED, TOP_LEVEL, EngineConfig
from funnel.errors import ConfigError

__all__ = ["FLAT_NAMES", "SECTIONS", "SECTION_MODELS", "SERVICE_SECTIONS", "TOP_FIELDS", "TOP_LEVEL",
           "DatabaseConfig", "EvalConfig", "ServeConfig", "SlackConfig", "TriageConfig", "as_dataclass", "env_var",
           "metadata", "section_key", "valid_names"]


@dataclass(frozen=True)
class ServeConfig:
    data_dir: Path = setting(Path(".funnel-data"), "collections (indexes + uploaded files)")
    job_threads: int = setting(2, "threads running ingest and calibration jobs (0: `funnel worker` does)",
                               ge=0, le=64)
    job_lease_s: float = setting(30.0, "a job whose process stops renewing it is taken again after this",
                                 ge=1, le=3600)
    max_upload_mb: int = setting(50, "largest upload request, in MiB", ge=1, le=10_000)
    api_key: str | None = setting(None, "required as X-API-Key or Authorization: Bearer on /v1/*, /api/*, "
                                        "/metrics", secret=True)
    cors_origins: list[str] = setting([], 'origins allowed by CORS, e.g. ["http://localhost:5173"]')


@dataclass(frozen=True)
class TriageConfig:
    repo: Path | None = setting(None, "the repository root (read_file is confined to it)")
    incidents: Path = setting(Path(".funnel-incidents.sqlite"), "the incident database")


@dataclass(frozen=True)
class SlackConfig:
    webhook_url: str | None = setting(None, "Slack incoming-webhook URL", secret=True)
    timeout_s: float = setting(10.0, "bound on each attempt to post to Slack", gt=0)
    retries: int = setting(4, "retries after a failed post (429, 5xx, down)", ge=0, le=10)


@dataclass(frozen=True)
class DatabaseConfig:
    url: str | None = setting(None, "keep all service state in this PostgreSQL (postgresql://...), shared by "
                                    "every process (serve, worker); unset: embedded under serve.data_dir",
                              secret=True)
    search_url: str | None = setting(None, "a streaming read replica of `url` where searches read the "
                                           "collection indexes (everything else stays on `url`)", secret=True)

    def __post_init__(self):
        for name, url in (("url", self.url), ("search_url", self.search_url)):
            if url is not None and url.split("://", 1)[0] not in ("postgresql", "postgres"):
                raise ConfigError(f"invalid setting database.{name}: must be a postgresql:// URL")


@dataclass(frozen=True)
class EvalConfig:
    cache: Path | None = setting(None, "where `funnel eval` keeps the index it builds per data set and "
                                       "embedder (default: ~/.cache/funnel/eval)")


# Section -> the dataclasses its keys come from. A key is the field's name less a `<section>_` prefix
# (RerankConfig's `rerank_weight` is [rerank] weight).
SECTIONS: dict[str, tuple[type, ...]] = {
    **{section: tuple(parts.values()) for section, parts in ENGINE_SECTIONS.items()},
    "serve": (ServeConfig, LimitsConfig),
    "triage": (TriageConfig,),
    "slack": (SlackConfig,),
    "database": (DatabaseConfig,),
    "eval": (EvalConfig,),
}
SERVICE_SECTIONS = ("serve", "triage", "slack", "database", "eval")

# Every key's flat name -> "section.key", generated as the engine's `FLAT_NAMES` are, for every section.
# The flat names are the flags' and keywords' names (`--data-dir`, `Settings(reranker=...)`); in funnel.toml
# and the environment they are the names of earlier releases, which work for one release and say so once.
FLAT_NAMES: dict[str, str] = flat_names(
    SECTIONS, (*FLAT_PREFIXED, "slack", "eval"),
    {**FLAT_IRREGULAR, "database": "database.url", "search_database": "database.search_url"},
)


def env_var(name: str) -> str:
    """The environment variable of a setting named flat (`k`) or by section (`search.k`): FUNNEL_SEARCH__K."""
    name = FLAT_NAMES.get(name, name)
    return "FUNNEL_" + name.upper().replace(".", "__")


def _fields(section: str):
    """(key, dataclass field, its type) of each key of a section."""
    return section_fields(section, SECTIONS[section])


def _pydantic_field(f, kind) -> tuple[Any, Any]:
    meta = dict(f.metadata)
    secret = meta.pop("secret", False)
    meta.pop("request_le", None)  # a request's ceiling (funnel.config.request_bounds), not the setting's
    kind = (SecretStr | None) if secret else kind
    default = {"default_factory": f.default_factory} if f.default is MISSING else {"default": f.default}
    return kind, Field(**default, **meta)


def _section_model(section: str) -> type[BaseModel]:
    model = create_model(
        f"{section.title()}Settings", __config__=ConfigDict(extra="forbid", frozen=True),
        **{key: _pydantic_field(f, kind) for key, f, kind in _fields(section)},
    )
    model.__doc__ = f"[{section}]: " + ", ".join(dc.__name__ for dc in SECTIONS[section])
    return model


SECTION_MODELS = {name: _section_model(name) for name in SECTIONS}
TOP_FIELDS = {f.name: f for f in fields(EngineConfig) if f.name in TOP_LEVEL}


def valid_names() -> list[str]:
    """Every setting's name as `section.key` (top-level ones bare)."""
    return [*TOP_LEVEL, *(f"{s}.{key}" for s in SECTIONS for key, _, _ in _fields(s))]


def metadata(loc: tuple) -> dict:
    """The metadata of the field a setting's location (`("search", "k")`) names; {} for none."""
    if len(loc) == 1 and loc[0] in TOP_FIELDS:
        return dict(TOP_FIELDS[loc[0]].metadata)
    if len(loc) == 2 and loc[0] in SECTIONS:
        return next((dict(f.metadata) for key, f, _ in _fields(loc[0]) if key == loc[1]), {})
    return {}


def as_dataclass(dc: type, section: str, values: BaseModel):
    """A section's values as one of its dataclasses, secrets as plain strings."""
    def plain(value):
        return value.get_secret_value() if isinstance(value, SecretStr) else value

    return dc(**{f.name: plain(getattr(values, key)) for key, f, _ in section_fields(section, (dc,))})
