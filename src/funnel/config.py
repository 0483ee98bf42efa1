"""Core configuration values: plain frozen dataclasses and enum parsing. No environment reading here
(that happens once, at the edge, in `funnel.apps.settings`)."""

from __future__ import annotations

import re
from dataclasses import field
from enum import Enum
from typing import Any, Self, TypeVar

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
    from dataclasses import fields

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


def setting(default: Any = None, description: str = "", *, secret: bool = False, **bounds: float) -> Any:
    """A config dataclass field with the metadata settings are generated from (`funnel.apps.settings`): its
    range (`ge`, `gt`, `le`), its description, and whether it is a secret (never printed). The default is
    written here, once."""
    meta = {**bounds, "description": description, **({"secret": True} if secret else {})}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta, repr=not secret)
