"""Core configuration values: plain frozen dataclasses and enum parsing. No environment reading here
(that happens once, at the edge, in `funnel.apps.settings`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import Field, dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Self, TypeVar, get_type_hints

from funnel.errors import ConfigError

E = TypeVar("E", bound=Enum)


def parse_enum(cls: type[E], value: str | E, what: str) -> E:
    """`cls(value)`, with an error that lists the valid values."""
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"unknown {what} {value!r}; valid: {valid}") from None


class Choice(str, Enum):
    """A mode named by a string at the edge: `parse` turns the string into a member, or raises a
    ConfigError naming the valid ones ("unknown rerank policy 'x'; valid: ..."; the class name says what)."""

    @classmethod
    def parse(cls, value: str | Self) -> Self:
        return parse_enum(cls, value, re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower())

    @classmethod
    def help(cls) -> str:
        """Every member for a help text, `auto | none | replace | …`, the default's note included."""
        return " | ".join(m.value for m in cls)


def check_ranges(config: Any) -> None:
    """Each field of a config dataclass within the range its `setting` metadata gives, or one ConfigError
    line naming the field and the range."""
    for f in fields(config):
        value, meta = getattr(config, f.name), f.metadata
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if (("ge" in meta and value < meta["ge"]) or ("gt" in meta and value <= meta["gt"])
                or ("le" in meta and value > meta["le"])):
            raise ConfigError(f"{f.name} must be {range_text(meta)}, got {value}")


def range_text(meta) -> str:
    """`at least 1`, `more than 0`, `between 1 and 1000`: a field's range as a message says it."""
    low = ("at least", meta["ge"]) if "ge" in meta else ("more than", meta["gt"]) if "gt" in meta else None
    if low and "le" in meta:
        return f"between {low[1]:g} and {meta['le']:g}" if low[0] == "at least" else \
            f"more than {low[1]:g} and at most {meta['le']:g}"
    return f"{low[0]} {low[1]:g}" if low else f"at most {meta['le']:g}"


def setting(default: Any = None, description: str = "", *, secret: bool = False,
            request_le: float | None = None, **bounds: float) -> Any:
    """A config dataclass field with the metadata settings are generated from (`funnel.apps.settings`): its
    range (`ge`, `gt`, `le`), its description, and whether it is a secret (never printed). The default is
    written here, once. `request_le`: a lower ceiling for what one request over the network may ask
    (`request_bounds`), where the configured value may go higher."""
    meta = {**bounds, "description": description, **({"secret": True} if secret else {}),
            **({"request_le": request_le} if request_le is not None else {})}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta, repr=not secret)


def bounds(config: type, name: str) -> dict[str, float]:
    """A field's range as `ge`/`gt`/`le` keywords, for a pydantic `Field(**bounds(...))`, a JSON schema or a
    help text (`range_text`): the range is written once, in the field's `setting`."""
    meta = next(f.metadata for f in fields(config) if f.name == name)
    return {key: meta[key] for key in ("ge", "gt", "le") if key in meta}


def request_bounds(config: type, name: str) -> dict[str, float]:
    """`bounds` with the field's `request_le` as the ceiling when it has one: what the HTTP API and the MCP
    tools accept in one request."""
    meta = next(f.metadata for f in fields(config) if f.name == name)
    return {**bounds(config, name), **({"le": meta["request_le"]} if "request_le" in meta else {})}


# --- sections and flat names --------------------------------------------------------------------------------


def section_key(section: str, name: str) -> str:
    """A field's key in its section: its name less a `<section>_` prefix (PolicyParams' `rerank_weight` is
    [rerank] weight)."""
    return name.removeprefix(f"{section}_")


def section_fields(section: str, classes: Iterable[type]) -> Iterator[tuple[str, Field, Any]]:
    """(key, dataclass field, its type) of each key a section's dataclasses give it (a field holding another
    config dataclass is not a key)."""
    for dc in classes:
        types = get_type_hints(dc)
        for f in fields(dc):
            if not is_dataclass(types[f.name]):
                yield section_key(section, f.name), f, types[f.name]


def flat_names(sections: dict[str, tuple[type, ...]], prefixed: Iterable[str] = (),
               irregular: dict[str, str] | None = None) -> dict[str, str]:
    """Every section key's flat name -> `section.key`. A flat name is the key itself (`k`), or
    `<section>_<key>` in a `prefixed` section, where the key alone would be ambiguous (`rerank_model`), or
    the name `irregular` gives it (`reranker` -> `rerank.backend`). One name per key; two keys with the same
    name is a ConfigError at import."""
    prefixed, renamed = set(prefixed), {target: name for name, target in (irregular or {}).items()}
    table: dict[str, str] = {}
    for section, classes in sections.items():
        for key, _, _ in section_fields(section, classes):
            target = f"{section}.{key}"
            name = renamed.pop(target, None) or (f"{section}_{key}" if section in prefixed else key)
            if name in table:
                raise ConfigError(f"flat name {name!r} would be both {table[name]} and {target}")
            table[name] = target
    if renamed:
        raise ConfigError(f"irregular flat names for keys that do not exist: {', '.join(sorted(renamed))}")
    return table


@dataclass(frozen=True)
class ModelsConfig:
    """[models]: where the models funnel builds or ships are read from; None: the default place. Here, below
    the embedders and rerankers that read it, rather than in `engine_config` with the other sections."""

    minilm_dir: Path | None = setting(
        None, "the ONNX build of the packaged all-MiniLM-L6-v2 (`minilm`), made there on first use (default: "
              "~/.cache/funnel/models/all-MiniLM-L6-v2)")
    e5_dir: Path | None = setting(
        None, "the int8 build of multilingual-e5-small (`e5-small`), made there on first use (default: "
              "~/.cache/funnel/models/multilingual-e5-small-q4)")
    reranker_dir: Path | None = setting(
        None, "the built-in reranker's model directory (`builtin`; default: the one packaged with funnel)")
