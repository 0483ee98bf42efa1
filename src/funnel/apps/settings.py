"""Settings, read once at the edge: flags > FUNNEL_* environment > funnel.toml > defaults.

They come in sections, each generated from a config dataclass, so a default and its range are written once,
in the dataclass (`funnel.engine_config` for the engine, the four below for the service):

    index, embedder, threads                  (top level)
    [search]    FirstStageConfig + GroupingConfig
    [rerank]    RerankConfig
    [llm]       LlmConfig        [answer] AnswerConfig
    [ingest]    IngestConfig
    [serve]     ServeConfig      [triage] TriageConfig
    [slack]     SlackConfig      [database] DatabaseConfig

In funnel.toml a section is a table (`[search]` then `k = 10`); in the environment `FUNNEL_SEARCH__K=10`.
The flat names of earlier releases (`k`, `reranker`, `llm_model`, ...) still work for one release, and say
once that they are deprecated (`DEPRECATED`).
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, create_model, model_validator
from pydantic_settings import (BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict,
                               TomlConfigSettingsSource)

from funnel.apps.state.limits import LimitsConfig
from funnel.config import range_text, setting
from funnel.engine_config import (AnswerConfig, EngineConfig, GroupingConfig, IngestConfig, LlmConfig,
                                  RerankConfig)
from funnel.errors import ConfigError
from funnel.retrieve.first_stage import FirstStageConfig


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


# Section -> the dataclasses its keys come from. A key is the field's name less a `<section>_` prefix
# (RerankConfig's `rerank_weight` is [rerank] weight).
SECTIONS: dict[str, tuple[type, ...]] = {
    "search": (FirstStageConfig, GroupingConfig),
    "rerank": (RerankConfig,),
    "llm": (LlmConfig,),
    "answer": (AnswerConfig,),
    "ingest": (IngestConfig,),
    "serve": (ServeConfig, LimitsConfig),
    "triage": (TriageConfig,),
    "slack": (SlackConfig,),
    "database": (DatabaseConfig,),
}
TOP_LEVEL = ("index", "embedder", "threads")  # EngineConfig's own fields

# The flat names of earlier releases -> "section.key". They work for one release and say so once.
DEPRECATED: dict[str, str] = {
    "k": "search.k", "candidates": "search.candidates", "per_retriever": "search.per_retriever",
    "retrieval": "search.retrieval", "rrf_k": "search.rrf_k", "bm25_weight": "search.bm25_weight",
    "dense_weight": "search.dense_weight",
    "reranker": "rerank.backend", "rerank_model": "rerank.model", "rerank_api_key": "rerank.api_key",
    "rerank_max_tokens": "rerank.max_tokens", "policy": "rerank.policy", "guaranteed": "rerank.guaranteed",
    "rerank_weight": "rerank.weight", "rerank_rrf_k": "rerank.rrf_k", "rerank_gate": "rerank.gate",
    "rerank_depth": "rerank.depth", "rerank_timeout_s": "rerank.timeout_s",
    "llm": "llm.backend", "llm_model": "llm.model", "llm_api_key": "llm.api_key",
    "llm_completion": "llm.completion",
    "llm_timeout_s": "llm.timeout_s", "llm_context_tokens": "llm.context_tokens",
    "llm_answer_tokens": "llm.answer_tokens",
    "max_tokens": "ingest.chunk_tokens", "analyzer": "ingest.analyzer", "max_file_mb": "ingest.max_file_mb",
    "max_pdf_mb": "ingest.max_pdf_mb",
    "data_dir": "serve.data_dir", "job_threads": "serve.job_threads", "job_lease_s": "serve.job_lease_s",
    "max_upload_mb": "serve.max_upload_mb", "api_key": "serve.api_key", "cors_origins": "serve.cors_origins",
    "repo": "triage.repo", "incidents": "triage.incidents",
    "slack_webhook_url": "slack.webhook_url", "slack_timeout_s": "slack.timeout_s",
    "slack_retries": "slack.retries",
    "database": "database.url", "search_database": "database.search_url",
}


def env_var(name: str) -> str:
    """The environment variable of a setting named flat (`k`) or by section (`search.k`): FUNNEL_SEARCH__K."""
    name = DEPRECATED.get(name, name)
    return "FUNNEL_" + name.upper().replace(".", "__")


def section_key(section: str, name: str) -> str:
    return name.removeprefix(f"{section}_")


def _fields(section: str):
    """(key, dataclass field, its type) of each key of a section."""
    for dc in SECTIONS[section]:
        types = get_type_hints(dc)
        for f in fields(dc):
            if not is_dataclass(types[f.name]):
                yield section_key(section, f.name), f, types[f.name]


def _pydantic_field(f, kind) -> tuple[Any, Any]:
    meta = dict(f.metadata)
    secret = meta.pop("secret", False)
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
_TOP_FIELDS = {f.name: f for f in fields(EngineConfig) if f.name in TOP_LEVEL}
_TOP_TYPES = get_type_hints(EngineConfig)


def valid_names() -> list[str]:
    """Every setting's name as `section.key` (top-level ones bare)."""
    return [*TOP_LEVEL, *(f"{s}.{key}" for s in SECTIONS for key, _, _ in _fields(s))]


def _nest(flat: dict[str, Any], say_where: str | None = None) -> dict[str, Any]:
    """Flat names of earlier releases moved into their sections (saying so once when `say_where` names a
    file or the environment); everything else as it is."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        target = DEPRECATED.get(name)
        if target is None or (name in SECTIONS and isinstance(value, dict)):
            out[name] = {**out.get(name, {}), **value} if isinstance(value, dict) else value
            continue
        section, key = target.split(".")
        out.setdefault(section, {})
        if isinstance(out[section], dict):
            out[section].setdefault(key, value)
        if say_where:
            _say_deprecated(name, target, say_where)
    return out


_SAID: set[str] = set()
_PENDING: list[str] = []  # said by `load_settings` once the settings load: a bad one's error stays one line


def _say_deprecated(name: str, target: str, where: str) -> None:
    if name in _SAID:
        return
    _SAID.add(name)
    section, key = target.split(".")
    _PENDING.append(f"funnel: setting {name!r} ({where}) is deprecated: use [{section}] {key} in funnel.toml, "
                    f"FUNNEL_{section.upper()}__{key.upper()} in the environment")


class _Toml(TomlConfigSettingsSource):
    """funnel.toml with the flat names of earlier releases moved into their sections."""

    def __call__(self) -> dict[str, Any]:
        return _nest(super().__call__(), f"in {self.toml_file_path}")


class _Env(EnvSettingsSource):
    """FUNNEL_SECTION__KEY. FUNNEL_LLM and FUNNEL_DATABASE named a backend and a URL before they were
    sections: _DeprecatedEnv reads those."""

    def __init__(self, settings_cls, **kwargs):
        super().__init__(settings_cls, **kwargs)
        collide = {f"funnel_{name}" for name in DEPRECATED if name in SECTIONS}
        self.env_vars = {k: v for k, v in self.env_vars.items() if k not in collide}


class _DeprecatedEnv(PydanticBaseSettingsSource):
    """FUNNEL_<FLAT NAME> of earlier releases, e.g. FUNNEL_K, moved into its section."""

    def get_field_value(self, field, field_name):  # the whole mapping comes from __call__
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        environ = {k.upper(): v for k, v in os.environ.items()}
        for name in DEPRECATED:
            value = environ.get(f"FUNNEL_{name.upper()}")
            if value is None:
                continue
            found[name] = json.loads(value) if name == "cors_origins" and value.startswith("[") else value
        return _nest(found, "in the environment") if found else {}


class Settings(BaseSettings):
    """funnel's settings: flags > FUNNEL_* environment > funnel.toml > defaults."""

    model_config = SettingsConfigDict(env_prefix="FUNNEL_", extra="forbid", toml_file="funnel.toml",
                                      env_nested_delimiter="__")

    # A string, not a Path: a postgresql:// URL must keep its double slash.
    index: str = Field(_TOP_FIELDS["index"].default, description=_TOP_FIELDS["index"].metadata["description"])
    embedder: str | None = Field(None, description=_TOP_FIELDS["embedder"].metadata["description"])
    threads: int | None = Field(None, ge=1, description=_TOP_FIELDS["threads"].metadata["description"])
    search: SECTION_MODELS["search"] = Field(default_factory=SECTION_MODELS["search"])  # type: ignore[valid-type]
    rerank: SECTION_MODELS["rerank"] = Field(default_factory=SECTION_MODELS["rerank"])  # type: ignore[valid-type]
    llm: SECTION_MODELS["llm"] = Field(default_factory=SECTION_MODELS["llm"])  # type: ignore[valid-type]
    answer: SECTION_MODELS["answer"] = Field(default_factory=SECTION_MODELS["answer"])  # type: ignore[valid-type]
    ingest: SECTION_MODELS["ingest"] = Field(default_factory=SECTION_MODELS["ingest"])  # type: ignore[valid-type]
    serve: SECTION_MODELS["serve"] = Field(default_factory=SECTION_MODELS["serve"])  # type: ignore[valid-type]
    triage: SECTION_MODELS["triage"] = Field(default_factory=SECTION_MODELS["triage"])  # type: ignore[valid-type]
    slack: SECTION_MODELS["slack"] = Field(default_factory=SECTION_MODELS["slack"])  # type: ignore[valid-type]
    database: SECTION_MODELS["database"] = Field(  # type: ignore[valid-type]
        default_factory=SECTION_MODELS["database"])

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        """Flags and `Settings(...)` keywords may use the flat names; a flag wins over the same key in a
        section that came from the environment or funnel.toml."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        flat = {n: data.pop(n) for n in list(data)
                if n in DEPRECATED and not (n in SECTIONS and isinstance(data[n], (dict, BaseModel)))}
        for name, value in flat.items():
            section, key = DEPRECATED[name].split(".")
            inner = data.get(section)
            inner = inner.model_dump() if isinstance(inner, BaseModel) else dict(inner or {})
            data[section] = {**inner, key: value}
        if isinstance(data.get("index"), Path):
            data["index"] = str(data["index"])  # open_store mends a URL a Path folded
        return data

    @model_validator(mode="after")
    def _checked(self) -> Settings:
        """The dataclasses' own checks (an analyzer, a rerank policy's parameters, a database URL)."""
        try:
            self.engine()
            for name in ("serve", "triage", "slack", "database"):
                self.section(name)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return self

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
        toml = _Toml(settings_cls, toml_file=named or "funnel.toml")
        return (init_settings, _Env(settings_cls), _DeprecatedEnv(settings_cls), toml)

    def engine(self) -> EngineConfig:
        """The engine's config these settings describe (ConfigError for a value the engine refuses)."""
        return EngineConfig(
            index=self.index, embedder=self.embedder, threads=self.threads,
            first_stage=_dataclass(FirstStageConfig, "search", self.search),
            grouping=_dataclass(GroupingConfig, "search", self.search),
            rerank=_dataclass(RerankConfig, "rerank", self.rerank),
            ingest=_dataclass(IngestConfig, "ingest", self.ingest),
            llm=_dataclass(LlmConfig, "llm", self.llm),
            answer=_dataclass(AnswerConfig, "answer", self.answer),
        )

    def section(self, name: str):
        """A service section as its dataclass (`ServeConfig`, ...), secrets as plain strings."""
        return _dataclass(SECTIONS[name][0], name, getattr(self, name))


def _dataclass(dc: type, section: str, values: BaseModel):
    def plain(value):
        return value.get_secret_value() if isinstance(value, SecretStr) else value

    hints = get_type_hints(dc)
    return dc(**{f.name: plain(getattr(values, section_key(section, f.name))) for f in fields(dc)
                 if not is_dataclass(hints[f.name])})


def load_settings(**overrides) -> Settings:
    """Settings with CLI flags applied; any invalid value becomes one ConfigError line."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
        for note in _PENDING:
            print(note, file=sys.stderr)
        return settings
    except ValidationError as e:
        raise ConfigError(_one_line(e.errors()[0])) from None
    except (OSError, ValueError, RecursionError) as e:  # unreadable or malformed funnel.toml
        source = os.environ.get("FUNNEL_CONFIG") or "funnel.toml"
        raise ConfigError(" ".join(f"cannot read settings from {source}: {e}".split())) from None
    finally:
        _PENDING.clear()


def _one_line(error: dict) -> str:
    """A pydantic error as one line: an unknown name with the nearest valid one, a value out of range with
    the range."""
    where = ".".join(str(p) for p in error["loc"]) or "settings"
    shown = where if where.isprintable() else repr(where)  # a TOML key may hold a newline
    if error["type"] == "extra_forbidden":
        known = {**{n: n for n in [*valid_names(), *SECTIONS]}, **DEPRECATED}  # a flat name: its new one
        near = difflib.get_close_matches(where, list(known), n=1, cutoff=0.5)
        bare = where.rsplit(".", 1)[-1]
        hint = [known[near[0]]] if near else difflib.get_close_matches(bare, valid_names(), n=1, cutoff=0.6)
        return f"unknown setting {shown}" + (f"; did you mean {hint[0]}?" if hint else
                                             f"; sections: {', '.join(SECTIONS)}")
    if not error["loc"] and error["type"] == "value_error":  # a dataclass's own check: its message as it is
        return str(error["ctx"]["error"])
    meta = _metadata(error["loc"])
    bounds = {k: meta[k] for k in ("ge", "gt", "le") if k in meta}
    if bounds and error["type"] in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return f"invalid setting {shown}: must be {range_text(bounds)}, got {error.get('input')}"
    return " ".join(f"invalid setting {shown}: {error['msg']}".split())


def _metadata(loc: tuple) -> dict:
    if len(loc) == 1 and loc[0] in _TOP_FIELDS:
        return dict(_TOP_FIELDS[loc[0]].metadata)
    if len(loc) == 2 and loc[0] in SECTIONS:
        return next((dict(f.metadata) for key, f, _ in _fields(loc[0]) if key == loc[1]), {})
    return {}


def explain_settings(settings: Settings, flags: dict[str, Any] | None = None) -> list[tuple[str, Any, str]]:
    """(name, value, source) of every setting: `search.k`, 10, "funnel.toml". Secrets show as `********`
    when set. Sources in the order they win: flag, environment (FUNNEL_SECTION__KEY, or a deprecated flat
    FUNNEL_NAME), funnel.toml, default."""
    named = os.environ.get("FUNNEL_CONFIG") or "funnel.toml"
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    sources = [
        ("flag", _nest(given)),
        ("environment", _Env(Settings)()),
        ("environment (deprecated name)", _DeprecatedEnv(Settings)()),
        (named, _Toml(Settings, toml_file=named)() if Path(named).is_file() else {}),
    ]
    rows = []
    for name in valid_names():
        section, _, key = name.rpartition(".")
        value = getattr(getattr(settings, section), key) if section else getattr(settings, key)
        shown = ("********" if value is not None else None) if isinstance(value, SecretStr) else _plain(value)
        source = next((label for label, found in sources if _has(found, section, key)), "default")
        if source == "environment":
            source = f"environment {env_var(name)}"
        rows.append((name, shown, source))
    return rows


def _has(found: dict, section: str, key: str) -> bool:
    inner = found.get(section, {}) if section else found
    return isinstance(inner, dict) and key in inner


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    return value.value if hasattr(value, "value") and not isinstance(value, (int, float, str)) else value
