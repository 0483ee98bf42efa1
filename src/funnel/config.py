"""Core configuration values: plain frozen dataclasses and enum parsing. No environment reading here
(that happens once, at the edge, in `funnel.apps.settings`)."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from funnel.errors import ConfigError

E = TypeVar("E", bound=Enum)


def parse_enum(cls: type[E], value: str | E, what: str) -> E:
    """`cls(value)`, with an error that lists the valid values."""
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"unknown {what} {value!r}; valid: {valid}") from None
