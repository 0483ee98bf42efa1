"""Settings, read once at the edge: flags > FUNNEL_* environment > funnel.toml > defaults.

They come in sections, each generated from a config dataclass, so a default and its range are written once,
in the dataclass (`funnel.engine_config` for the engine, `funnel.apps.settings_sections` for the service,
which lists the sections and makes their models). This module reads them: the sources, `Settings`,
`load_settings`, one-line errors, and `explain_settings` (`funnel config`).

In funnel.toml a section is a table (`[search]` then `k = 10`); in the environment `FUNNEL_SEARCH__K=10`.
Flags and keywords take the flat names (`k`, `reranker`, `data_dir`: `FLAT_NAMES`); in funnel.toml and the
environment the flat names of earlier releases (`k`, `llm_model`, FUNNEL_MODEL_DIR, ...) still work for one
release, and say once that they are deprecated.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any, get_origin

from pydantic import BaseModel, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict,
                               TomlConfigSettingsSource)

from funnel.apps.settings_sections import (  # noqa: F401  (re-exported: importers use funnel.apps.settings)
    FLAT_NAMES, SECTION_MODELS, SECTIONS, SERVICE_SECTIONS, TOP_FIELDS, TOP_LEVEL, DatabaseConfig, EvalConfig,
    ServeConfig, SlackConfig, TriageConfig, as_dataclass, env_var, metadata, section_key, valid_names,
)
from funnel.config import range_text
from funnel.engine_config import ENGINE_SECTIONS, EngineConfig
from funnel.errors import ConfigError


def _nest(flat: dict[str, Any], say_where: str | None = None) -> dict[str, Any]:
    """Flat names moved into their sections (saying once that they are deprecated when `say_where` names a
    file or the environment: flags and keywords are not); everything else as it is."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        target = FLAT_NAMES.get(name)
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
        collide = {f"funnel_{name}" for name in FLAT_NAMES if name in SECTIONS}
        self.env_vars = {k: v for k, v in self.env_vars.items() if k not in collide}


class _DeprecatedEnv(PydanticBaseSettingsSource):
    """FUNNEL_<FLAT NAME> of earlier releases, e.g. FUNNEL_K or FUNNEL_MODEL_DIR, moved into its section."""

    def get_field_value(self, field, field_name):  # the whole mapping comes from __call__
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        environ = {k.upper(): v for k, v in os.environ.items()}
        for name in FLAT_NAMES:
            value = environ.get(f"FUNNEL_{name.upper()}")
            if value is None:
                continue
            section, key = FLAT_NAMES[name].split(".")
            listed = get_origin(SECTION_MODELS[section].model_fields[key].annotation) is list  # cors_origins
            found[name] = json.loads(value) if listed and value.startswith("[") else value
        return _nest(found, "in the environment") if found else {}


class Settings(BaseSettings):
    """funnel's settings: flags > FUNNEL_* environment > funnel.toml > defaults."""

    model_config = SettingsConfigDict(env_prefix="FUNNEL_", extra="forbid", toml_file="funnel.toml",
                                      env_nested_delimiter="__")

    # A string, not a Path: a postgresql:// URL must keep its double slash.
    index: str = Field(TOP_FIELDS["index"].default, description=TOP_FIELDS["index"].metadata["description"])
    embedder: str | None = Field(None, description=TOP_FIELDS["embedder"].metadata["description"])
    threads: int | None = Field(None, ge=1, description=TOP_FIELDS["threads"].metadata["description"])
    search: SECTION_MODELS["search"] = Field(default_factory=SECTION_MODELS["search"])  # type: ignore[valid-type]
    rerank: SECTION_MODELS["rerank"] = Field(default_factory=SECTION_MODELS["rerank"])  # type: ignore[valid-type]
    llm: SECTION_MODELS["llm"] = Field(default_factory=SECTION_MODELS["llm"])  # type: ignore[valid-type]
    answer: SECTION_MODELS["answer"] = Field(default_factory=SECTION_MODELS["answer"])  # type: ignore[valid-type]
    ingest: SECTION_MODELS["ingest"] = Field(default_factory=SECTION_MODELS["ingest"])  # type: ignore[valid-type]
    models: SECTION_MODELS["models"] = Field(  # type: ignore[valid-type]
        default_factory=SECTION_MODELS["models"])
    serve: SECTION_MODELS["serve"] = Field(default_factory=SECTION_MODELS["serve"])  # type: ignore[valid-type]
    triage: SECTION_MODELS["triage"] = Field(default_factory=SECTION_MODELS["triage"])  # type: ignore[valid-type]
    slack: SECTION_MODELS["slack"] = Field(default_factory=SECTION_MODELS["slack"])  # type: ignore[valid-type]
    database: SECTION_MODELS["database"] = Field(  # type: ignore[valid-type]
        default_factory=SECTION_MODELS["database"])
    eval: SECTION_MODELS["eval"] = Field(default_factory=SECTION_MODELS["eval"])  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        """Flags and `Settings(...)` keywords may use the flat names (`FLAT_NAMES`, not deprecated there); a
        flag wins over the same key in a section that came from the environment or funnel.toml."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        flat = {n: data.pop(n) for n in list(data)
                if n in FLAT_NAMES and not (n in SECTIONS and isinstance(data[n], (dict, BaseModel)))}
        for name, value in flat.items():
            section, key = FLAT_NAMES[name].split(".")
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
            for name in SERVICE_SECTIONS:
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
        parts = {part: as_dataclass(dc, section, getattr(self, section))
                 for section, classes in ENGINE_SECTIONS.items() for part, dc in classes.items()}
        return EngineConfig(index=self.index, embedder=self.embedder, threads=self.threads, **parts)

    def section(self, name: str):
        """A section as its (first) dataclass (`ServeConfig`, `ModelsConfig`, ...), secrets as plain
        strings."""
        return as_dataclass(SECTIONS[name][0], name, getattr(self, name))


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
        known = {**{n: n for n in [*valid_names(), *SECTIONS]}, **FLAT_NAMES}  # a flat name: its new one
        near = difflib.get_close_matches(where, list(known), n=1, cutoff=0.5)
        bare = where.rsplit(".", 1)[-1]
        hint = [known[near[0]]] if near else difflib.get_close_matches(bare, valid_names(), n=1, cutoff=0.6)
        return f"unknown setting {shown}" + (f"; did you mean {hint[0]}?" if hint else
                                             f"; sections: {', '.join(SECTIONS)}")
    if not error["loc"] and error["type"] == "value_error":  # a dataclass's own check: its message as it is
        return str(error["ctx"]["error"])
    meta = metadata(error["loc"])
    bounds = {k: meta[k] for k in ("ge", "gt", "le") if k in meta}
    if bounds and error["type"] in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return f"invalid setting {shown}: must be {range_text(bounds)}, got {error.get('input')}"
    return " ".join(f"invalid setting {shown}: {error['msg']}".split())


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
